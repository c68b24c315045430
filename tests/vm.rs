//! VM tests: kTLS needs a kernel with tls.ko, which the host may lack, so
//! `tests/vm/run.sh` boots Debian's 6.1 kernel under qemu (TCG) with a busybox
//! initramfs holding the static ringdl and an HTTPS test server, and checks every case.
//!
//! Opt-in: runs only with `RINGDL_VM_TESTS=1` (scripts/test.sh sets it; without it the
//! test skips loudly, and fails under `CI=true`) (it may install qemu-system-x86,
//! busybox-static and cpio with apt, downloads a ≈ 70 MB kernel package once into
//! `/var/tmp/ringdl-vm`, and takes about half a minute). `RINGDL_STATIC_BIN` and
//! `RINGDL_VM_SERVER_BIN` point at prebuilt static binaries; without them the script
//! builds both (musl, release).

use std::path::Path;
use std::process::Command;

#[test]
fn vm_cases_pass() {
    if std::env::var_os("RINGDL_VM_TESTS").is_none_or(|v| v != "1") {
        crate::util::skip(
            "set RINGDL_VM_TESTS=1 to boot the kTLS test VM (tests/vm/run.sh: qemu TCG, Debian \
             linux-image-6.1, root for apt)",
        );
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/vm/run.sh");
    let status = Command::new("bash")
        .arg(&script)
        .current_dir(root)
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        status.success(),
        "{} failed ({status}); the console log is in $RINGDL_VM_CACHE/console.log \
         (default /var/tmp/ringdl-vm/console.log)",
        script.display()
    );
}
