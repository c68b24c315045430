//! VM tests: kTLS needs a kernel with tls.ko, which the host may lack, so
//! `tests/vm/run.sh` boots a Debian kernel under qemu (TCG) with a busybox initramfs
//! holding the static ringdl and an HTTPS test server, and checks every case. Two kernels:
//! 6.1 (bookworm: a KeyUpdate under kTLS costs a reconnect) and the current one pinned in
//! `tests/vm/run.sh` (`CURRENT_KERNEL_PKG`, trixie-backports: rekey in place, O_DIRECT on
//! tmpfs). The two runs take turns (one TCG guest at a time on a small machine).
//!
//! Opt-in: the tests are `#[ignore]`d, so a plain `cargo test` reports them as ignored in
//! its summary line (never as passed); `cargo test --release --test tests -- --ignored
//! vm::` runs them, and scripts/test.sh does unless `RINGDL_VM_TESTS=0`. It may install qemu-system-x86,
//! busybox-static, cpio, xz-utils and zstd with apt, downloads each kernel package once into
//! `/var/tmp/ringdl-vm` — ≈ 70 MB for 6.1, ≈ 120 MB for the current one — and takes a few
//! minutes. `RINGDL_STATIC_BIN`, `RINGDL_VM_SERVER_BIN` and `RINGDL_VM_SECCOMP_BIN` point
//! at prebuilt static binaries; without them the script builds them (musl, release).
//! Besides kTLS the cases cover an image without CA files (the bundled roots) and io_uring
//! refused (`kernel.io_uring_disabled=2` on the current kernel, the seccomp filter on 6.1).

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// One TCG guest at a time.
static VM: Mutex<()> = Mutex::new(());

fn run_vm(kernel: &str) {
    let _one = VM.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/vm/run.sh");
    let status = Command::new("bash")
        .arg(&script)
        .args(["--kernel", kernel])
        .current_dir(root)
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        status.success(),
        "{} --kernel {kernel} failed ({status}); the console log path is in its output \
         (kept under $RINGDL_VM_CACHE/logs, default /var/tmp/ringdl-vm/logs)",
        script.display()
    );
}

#[test]
#[ignore = "boots qemu (minutes, a kernel download): -- --ignored vm::, or scripts/test.sh"]
fn vm_cases_pass_linux_6_1() {
    run_vm("6.1");
}

#[test]
#[ignore = "boots qemu (minutes, a kernel download): -- --ignored vm::, or scripts/test.sh"]
fn vm_cases_pass_current_kernel() {
    run_vm("current");
}
