//! `--signature` / `--trusted-key`: detached signatures made at test time by the real tools
//! (ssh-keygen -Y sign with ed25519, ecdsa P-256/P-384 and rsa keys; signify-openbsd;
//! minisign, default prehashed and legacy -l), over files the test nginx serves. Checked:
//! a good signature lands the file; a changed byte, another key, another namespace, a
//! truncated signature each exit 10 and rename nothing (the `.part` stays); a signed
//! SHA256SUMS that names another digest verifies and then fails the checksum (9); a
//! signature as a URL; a raw-message signature over a file above the 64 MiB bound is
//! refused (exit 2) before a byte lands; a PGP clear-signed SHA256SUMS is said unchecked.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{MIB, TestDir, exit, nginx, part_path, sha256_file, write_random_file};

/// `--checksum` mismatch.
const CHECKSUM: i32 = 9;
/// Signature not verified.
const SIGNATURE: i32 = 10;

/// The tools, by the paths Debian's packages install (scripts/test.sh installs them).
const SSH_KEYGEN: &str = "/usr/bin/ssh-keygen";
const SIGNIFY: &str = "/usr/bin/signify-openbsd";
const MINISIGN: &str = "/usr/bin/minisign";

/// A directory the test nginx serves (`sig-<name>/`), a work dir, and a served image.
struct Site {
    dir: TestDir,
    www: PathBuf,
    name: String,
    /// SHA-256 of `image.bin` as served.
    sha: String,
}

impl Site {
    fn new(name: &str, size: u64) -> Site {
        let n = nginx();
        let www = n.www().join(format!("sig-{name}"));
        let _ = std::fs::remove_dir_all(&www);
        std::fs::create_dir_all(&www).unwrap();
        let sha = write_random_file(&www.join("image.bin"), size, 23);
        Site {
            dir: TestDir::new(&format!("signature_{name}")),
            www,
            name: name.to_owned(),
            sha,
        }
    }

    fn url(&self, file: &str) -> String {
        nginx().http_url(&format!("sig-{}/{file}", self.name))
    }

    fn image(&self) -> PathBuf {
        self.www.join("image.bin")
    }

    fn out(&self) -> PathBuf {
        self.dir.join("image.bin")
    }

    /// `ringdl -x 4 -o OUT --signature SIG --trusted-key KEY… URL(image.bin)` plus `extra`.
    fn fetch(&self, sig: &str, keys: &[&Path], extra: &[&str]) -> crate::util::Output {
        let mut c = self.dir.ringdl();
        c.args(["-x", "4", "-v", "-o"])
            .arg(self.out())
            .arg("--signature")
            .arg(sig);
        for k in keys {
            c.arg("--trusted-key").arg(k);
        }
        c.args(extra).arg(self.url("image.bin")).run()
    }

    /// The file landed with the served bytes, no `.part` left.
    fn assert_landed(&self, o: &crate::util::Output) {
        o.assert_success();
        assert_eq!(sha256_file(&self.out()), self.sha, "{}", o.stderr_text());
        assert!(!part_path(&self.out()).exists());
    }

    /// Exit `code`, nothing renamed into place.
    fn assert_refused(&self, o: &crate::util::Output, code: i32) -> String {
        o.assert_code(code);
        assert!(!self.out().exists(), "renamed into place: {}", o.stderr_text());
        o.stderr_text()
    }

    /// Exit 10 before the download: a signature no trusted key may have made is refused
    /// whatever the bytes, so none is fetched (no `.part`).
    fn assert_refused_before(&self, o: &crate::util::Output) -> String {
        let err = self.assert_refused(o, SIGNATURE);
        assert!(err.contains("; nothing fetched"), "{err}");
        assert!(!part_path(&self.out()).exists(), "a .part was made: {err}");
        err
    }
}

/// Runs a tool; panics with its output when it fails.
fn tool(program: &str, args: &[&str], dir: &Path) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/test.sh installs it)"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An OpenSSH key pair `name` of `kind` (`ed25519`, `ecdsa-256`, `ecdsa-384`, `rsa`) in `dir`.
fn ssh_key(dir: &Path, name: &str, kind: &str) -> PathBuf {
    let (t, bits) = kind.split_once('-').unwrap_or((kind, ""));
    let mut args = vec!["-q", "-t", t, "-N", "", "-C", name, "-f", name];
    if !bits.is_empty() {
        args.extend(["-b", bits]);
    }
    tool(SSH_KEYGEN, &args, dir);
    dir.join(format!("{name}.pub"))
}

/// `ssh-keygen -Y sign -n NAMESPACE -f KEY FILE` → FILE.sig.
fn ssh_sign(key: &Path, namespace: &str, file: &Path) -> PathBuf {
    let priv_key = key.with_extension("");
    tool(
        SSH_KEYGEN,
        &[
            "-q",
            "-Y",
            "sign",
            "-n",
            namespace,
            "-f",
            priv_key.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
        file.parent().unwrap(),
    );
    PathBuf::from(format!("{}.sig", file.display()))
}

/// The `SHA256:…` fingerprint `ssh-keygen -l` prints for `key`.
fn ssh_fingerprint(key: &Path) -> String {
    let o = Command::new(SSH_KEYGEN).arg("-lf").arg(key).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_owned()
}

/// A signify key pair in `dir`: returns the `.pub`.
fn signify_key(dir: &Path, name: &str) -> PathBuf {
    let (p, s) = (format!("{name}.pub"), format!("{name}.sec"));
    tool(SIGNIFY, &["-G", "-n", "-p", &p, "-s", &s], dir);
    dir.join(p)
}

/// `signify-openbsd -S -s KEY.sec -m FILE -x SIG`.
fn signify_sign(key: &Path, file: &Path, sig: &Path) {
    let sec = key.with_extension("sec");
    tool(
        SIGNIFY,
        &[
            "-S",
            "-s",
            sec.to_str().unwrap(),
            "-m",
            file.to_str().unwrap(),
            "-x",
            sig.to_str().unwrap(),
        ],
        file.parent().unwrap(),
    );
}

/// A minisign key pair (no password, `-W`) in `dir`: returns the `.pub`.
pub(crate) fn minisign_key(dir: &Path, name: &str) -> PathBuf {
    let (p, s) = (format!("{name}.pub"), format!("{name}.key"));
    tool(MINISIGN, &["-G", "-W", "-p", &p, "-s", &s], dir);
    dir.join(p)
}

/// `minisign -S [-l] -s KEY -m FILE -x SIG`.
pub(crate) fn minisign_sign(key: &Path, file: &Path, sig: &Path, legacy: bool) {
    let sec = key.with_extension("key");
    let mut args = vec!["-S"];
    if legacy {
        args.push("-l");
    }
    args.extend([
        "-s",
        sec.to_str().unwrap(),
        "-m",
        file.to_str().unwrap(),
        "-x",
        sig.to_str().unwrap(),
    ]);
    tool(MINISIGN, &args, file.parent().unwrap());
}

/// Flips one byte in the middle of `file` (on the server, after signing).
fn flip_byte(file: &Path) {
    let mut b = std::fs::read(file).unwrap();
    let i = b.len() / 2;
    b[i] ^= 0x40;
    std::fs::write(file, b).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn sshsig_every_key_type_lands_the_file_and_a_changed_byte_stays_in_the_part() {
    for kind in ["ed25519", "ecdsa-256", "ecdsa-384", "rsa"] {
        let site = Site::new(&format!("ssh-{kind}"), 4 * MIB + 4097);
        let key = ssh_key(site.dir.path(), "signer", kind);
        let sig = ssh_sign(&key, "file", &site.image());
        let json = site.dir.join("record.json");
        let o = site.fetch(s(&sig), &[&key], &["--json", s(&json)]);
        site.assert_landed(&o);
        let fp = ssh_fingerprint(&key);
        let err = o.stderr_text();
        assert!(
            err.contains("sshsig signature") && err.contains(&format!("key {fp}")),
            "{kind}: {err}"
        );
        let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(j["signature"]["format"], "sshsig", "{j}");
        assert_eq!(j["signature"]["key"], fp.as_str(), "{j}");
        assert_eq!(j["signature"]["verified"], true, "{j}");
        std::fs::remove_file(site.out()).unwrap();

        // One byte changed on the server after signing: exit 10, the bytes kept in .part.
        flip_byte(&site.image());
        let changed = sha256_file(&site.image());
        let o = site.fetch(s(&sig), &[&key], &["--json", s(&json)]);
        let err = site.assert_refused(&o, SIGNATURE);
        assert!(err.contains("BAD signature") && err.contains(&fp), "{kind}: {err}");
        assert!(err.contains(".part"), "{kind}: the message names the file: {err}");
        assert_eq!(
            sha256_file(&part_path(&site.out())),
            changed,
            "{kind}: the .part holds what came"
        );
        let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(
            (j["exit_code"].as_u64(), &j["signature"]["verified"]),
            (Some(10), &false.into()),
            "{j}"
        );
    }
}

#[test]
fn sshsig_other_key_wrong_namespace_and_allowed_signers() {
    let site = Site::new("ssh-keys", MIB + 1);
    let key = ssh_key(site.dir.path(), "signer", "ed25519");
    let other = ssh_key(site.dir.path(), "other", "ed25519");
    let sig = ssh_sign(&key, "file", &site.image());

    let o = site.fetch(s(&sig), &[&other], &[]);
    let err = site.assert_refused_before(&o);
    assert!(
        err.contains("no --trusted-key holds") && err.contains(&ssh_fingerprint(&key)),
        "{err}"
    );

    // Signed for the namespace "git": refused for "file" (the default), taken for "git".
    // (ssh-keygen does not replace an existing .sig: sign a copy of the same bytes.)
    let copy = site.dir.join("copy.bin");
    std::fs::copy(site.image(), &copy).unwrap();
    let git_sig = ssh_sign(&key, "git", &copy);
    let json = site.dir.join("namespace.json");
    let o = site.fetch(s(&git_sig), &[&key], &["--force", "--json", s(&json)]);
    let err = site.assert_refused_before(&o);
    let fp = ssh_fingerprint(&key);
    assert!(
        err.contains("namespace \"git\"") && err.contains(&format!("by key {fp}")),
        "{err}"
    );
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["signature"]["key"], fp.as_str(), "{j}");
    let o = site.fetch(s(&git_sig), &[&key], &["--signature-namespace", "git", "--force"]);
    site.assert_landed(&o);
    std::fs::remove_file(site.out()).unwrap();

    // An allowed-signers file: the principal is named; a namespaces= that leaves out
    // "file" refuses the key.
    let line = std::fs::read_to_string(&key).unwrap();
    let allowed = site.dir.join("allowed_signers");
    std::fs::write(&allowed, format!("release@example.org namespaces=\"file\" {line}")).unwrap();
    let o = site.fetch(s(&sig), &[&other, &allowed], &[]);
    site.assert_landed(&o);
    assert!(o.stderr_text().contains("(release@example.org)"), "{}", o.stderr_text());
    std::fs::remove_file(site.out()).unwrap();
    std::fs::write(&allowed, format!("release@example.org namespaces=\"git\" {line}")).unwrap();
    let o = site.fetch(s(&sig), &[&allowed], &["--force", "--json", s(&json)]);
    let err = site.assert_refused_before(&o);
    assert!(err.contains("not allowed to sign namespace \"file\""), "{err}");
    // The refusal names the key's principals as a success does.
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        (&j["signature"]["key"], &j["signature"]["principals"]),
        (&fp.as_str().into(), &"release@example.org".into()),
        "{j}"
    );
}

#[test]
fn truncated_signature_fails_before_the_download() {
    let site = Site::new("truncated", MIB + 1);
    let key = ssh_key(site.dir.path(), "signer", "ed25519");
    let sig = ssh_sign(&key, "file", &site.image());
    let text = std::fs::read(&sig).unwrap();
    let cut = site.dir.join("cut.sig");
    std::fs::write(&cut, &text[..text.len() / 2]).unwrap();
    let o = site.fetch(s(&cut), &[&key], &[]);
    let err = site.assert_refused(&o, SIGNATURE);
    assert!(err.contains("truncated") && err.contains("cut.sig"), "{err}");
    assert!(
        !part_path(&site.out()).exists(),
        "a bad signature file is found before the output is touched"
    );

    let spub = signify_key(site.dir.path(), "sf");
    let ssig = site.dir.join("image.bin.sig");
    signify_sign(&spub, &site.image(), &ssig);
    let text = std::fs::read(&ssig).unwrap();
    std::fs::write(&cut, &text[..text.len() - 12]).unwrap();
    let o = site.fetch(s(&cut), &[&spub], &[]);
    let err = site.assert_refused(&o, SIGNATURE);
    assert!(err.contains("signify"), "{err}");

    // A missing signature file: the signature's exit code too.
    let o = site.fetch(s(&site.dir.join("absent.sig")), &[&spub], &[]);
    let err = site.assert_refused(&o, SIGNATURE);
    assert!(err.contains("absent.sig"), "{err}");
}

#[test]
fn signify_and_minisign_over_the_file() {
    let site = Site::new("ed-file", 4 * MIB + 4097);
    let spub = signify_key(site.dir.path(), "sf");
    let mpub = minisign_key(site.dir.path(), "mi");
    let ssig = site.dir.join("image.bin.sig");
    signify_sign(&spub, &site.image(), &ssig);
    let prehashed = site.dir.join("image.bin.minisig");
    minisign_sign(&mpub, &site.image(), &prehashed, false);
    let legacy = site.dir.join("image.bin.legacy.minisig");
    minisign_sign(&mpub, &site.image(), &legacy, true);
    for (i, (sig, key, what)) in [
        (&ssig, &spub, "signify"),
        (&prehashed, &mpub, "minisign"),
        (&legacy, &mpub, "minisign"),
    ]
    .into_iter()
    .enumerate()
    {
        let o = site.fetch(s(sig), &[key], &[]);
        site.assert_landed(&o);
        assert!(
            o.stderr_text().contains(&format!("{what} signature")),
            "{}",
            o.stderr_text()
        );
        std::fs::remove_file(site.out()).unwrap();
        // Another key of the same format.
        let other = if what == "signify" {
            signify_key(site.dir.path(), &format!("other-{i}"))
        } else {
            minisign_key(site.dir.path(), &format!("other-{i}"))
        };
        let o = site.fetch(s(sig), &[&other], &["--force"]);
        let err = site.assert_refused_before(&o);
        assert!(err.contains("no --trusted-key holds"), "{err}");
    }
    flip_byte(&site.image());
    for (sig, key) in [(&ssig, &spub), (&prehashed, &mpub), (&legacy, &mpub)] {
        let o = site.fetch(s(sig), &[key], &["--force"]);
        let err = site.assert_refused(&o, SIGNATURE);
        assert!(err.contains("BAD signature"), "{err}");
        assert!(part_path(&site.out()).exists(), "the .part stays");
    }
}

#[test]
fn signed_sha256sums_checks_the_file() {
    let site = Site::new("sums", 4 * MIB + 4097);
    let spub = signify_key(site.dir.path(), "sf");
    let mpub = minisign_key(site.dir.path(), "mi");
    let sums = site.dir.join("SHA256SUMS");
    std::fs::write(&sums, format!("{}  image.bin\n", site.sha)).unwrap();
    let ssig = site.dir.join("SHA256SUMS.sig");
    signify_sign(&spub, &sums, &ssig);
    let msig = site.dir.join("SHA256SUMS.minisig");
    minisign_sign(&mpub, &sums, &msig, false);
    for (sig, key) in [(&ssig, &spub), (&msig, &mpub)] {
        let o = site.fetch(s(sig), &[key], &["--checksum-file", s(&sums)]);
        site.assert_landed(&o);
        let err = o.stderr_text();
        assert!(err.contains("verified over") && err.contains("SHA256SUMS"), "{err}");
        assert!(o.summary().contains("sha-256 verified"), "{}", o.summary());
        std::fs::remove_file(site.out()).unwrap();
    }

    // A SHA256SUMS naming another digest, properly signed: the signature verifies, the
    // checksum fails (9), the bytes stay in .part.
    let other = "0123456789abcdef".repeat(4);
    std::fs::write(&sums, format!("{other}  image.bin\n")).unwrap();
    signify_sign(&spub, &sums, &ssig);
    let o = site.fetch(s(&ssig), &[&spub], &["--checksum-file", s(&sums)]);
    let err = site.assert_refused(&o, CHECKSUM);
    assert!(err.contains("sha-256 mismatch") && err.contains(&other), "{err}");
    assert_eq!(sha256_file(&part_path(&site.out())), site.sha);
    std::fs::remove_file(part_path(&site.out())).unwrap();
    let _ = std::fs::remove_file(crate::util::part_path(&site.out()).with_extension("part.ringdl"));

    // The SHA256SUMS changed after signing: exit 10 before any byte is fetched.
    std::fs::write(&sums, format!("{}  image.bin\n", site.sha)).unwrap();
    let o = site.fetch(s(&ssig), &[&spub], &["--checksum-file", s(&sums)]);
    let err = site.assert_refused(&o, SIGNATURE);
    assert!(err.contains("BAD signature") && err.contains("SHA256SUMS"), "{err}");
    assert!(
        !part_path(&site.out()).exists(),
        "nothing fetched before the signature failed"
    );
}

#[test]
fn signature_given_as_a_url() {
    let site = Site::new("url", MIB + 1);
    let key = ssh_key(site.dir.path(), "signer", "ecdsa-256");
    let sig = ssh_sign(&key, "file", &site.image());
    assert!(sig.starts_with(&site.www), "the signature is served beside the image");
    // The signature lands in a private directory under TMPDIR, removed after reading.
    let tmp = site.dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let o = site
        .dir
        .ringdl()
        .env("TMPDIR", &tmp)
        .args(["-v", "-o", s(&site.out()), "--trusted-key", s(&key), "--signature"])
        .arg(site.url("image.bin.sig"))
        .arg(site.url("image.bin"))
        .run();
    site.assert_landed(&o);
    assert!(
        o.stderr_text().contains("image.bin.sig verified"),
        "{}",
        o.stderr_text()
    );
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "a temporary copy is left");
    std::fs::remove_file(site.out()).unwrap();

    // A signature URL that is not there: the signature's exit code, nothing fetched.
    let o = site.fetch(&site.url("missing.sig"), &[&key], &[]);
    let err = site.assert_refused(&o, SIGNATURE);
    assert!(err.contains("missing.sig") && err.contains("404"), "{err}");
    assert!(!part_path(&site.out()).exists());
}

/// The worked example of docs/guide/updates.md, step 1: a signature URL with
/// `--etag-compare`/`--etag-save`. The second poll of an unchanged file is "not
/// modified"; the signature's own fetch neither sends the file's condition nor saves its
/// ETag into the file's etag file (it did: the file's next request then carried the
/// signature's ETag and was fetched every poll).
#[test]
fn a_signature_url_does_not_take_the_files_etag() {
    let site = Site::new("etag", MIB + 1);
    let key = ssh_key(site.dir.path(), "signer", "ed25519");
    ssh_sign(&key, "file", &site.image());
    let etag = site.dir.join("image.etag");
    let poll = |json: &std::path::Path| {
        site.dir
            .ringdl()
            .args(["-v", "-o", s(&site.out()), "--trusted-key", s(&key)])
            .args(["--etag-compare", s(&etag), "--etag-save", s(&etag), "--json", s(json)])
            .arg("--signature")
            .arg(site.url("image.bin.sig"))
            .arg(site.url("image.bin"))
            .run()
    };
    let first = site.dir.join("first.json");
    let o = poll(&first);
    site.assert_landed(&o);
    let saved = std::fs::read_to_string(&etag).unwrap();
    let second = site.dir.join("second.json");
    let o = poll(&second);
    let err = o.stderr_text();
    assert!(o.status.success(), "{err}");
    let j = std::fs::read_to_string(&second).unwrap();
    assert!(
        j.contains("\"not_modified\":true"),
        "the unchanged file was fetched again: {j}\n{err}"
    );
    assert!(err.contains("not modified"), "{err}");
    assert_eq!(std::fs::read_to_string(&etag).unwrap(), saved, "the etag file changed");
}

/// A 304 with `--signature` (issue 40, "silent successes", 2): the kept file is read
/// back and its signature checked as a fetched one's is — `--json`'s signature object
/// says verified (it was null: nothing checked); a kept file changed on disk (same size
/// and time) is exit 10, left as it is (it once ended 0).
#[test]
fn a_304_checks_the_signature_of_the_file_kept() {
    let site = Site::new("kept", 200 * 1024 + 3);
    let key = ssh_key(site.dir.path(), "signer", "ed25519");
    let sig = ssh_sign(&key, "file", &site.image());
    let etag = site.dir.join("image.etag");
    let json = site.dir.join("run.json");
    let poll = || {
        site.dir
            .ringdl()
            .args(["-o", s(&site.out()), "--trusted-key", s(&key), "--signature", s(&sig)])
            .args(["--etag-compare", s(&etag), "--etag-save", s(&etag), "--json", s(&json)])
            .arg(site.url("image.bin"))
            .run()
    };
    site.assert_landed(&poll());
    let o = poll();
    let err = o.stderr_text();
    assert!(o.status.success(), "{err}");
    let j = std::fs::read_to_string(&json).unwrap();
    assert!(
        j.contains("\"not_modified\":true") && j.contains("\"verified\":true"),
        "the kept file's signature was not checked: {j}\n{err}"
    );
    let out = site.out();
    let mut bytes = std::fs::read(&out).unwrap();
    bytes[7] ^= 1;
    let t = std::fs::metadata(&out).unwrap().modified().unwrap();
    std::fs::write(&out, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&out)
        .unwrap()
        .set_modified(t)
        .unwrap();
    let o = poll();
    let err = o.stderr_text();
    o.assert_code(SIGNATURE);
    assert!(
        err.contains("304 Not Modified") && err.contains("is left as it is"),
        "{err}"
    );
    let j = std::fs::read_to_string(&json).unwrap();
    assert!(
        j.contains("\"not_modified\":true") && j.contains("\"verified\":false"),
        "{j}\n{err}"
    );
    assert_eq!(std::fs::read(&out).unwrap(), bytes, "the kept file was touched");
}

#[test]
fn raw_message_signature_over_a_large_file_is_refused_before_the_download() {
    // 100 MiB served, more than the 64 MiB bound of signify and minisign -l: refused
    // when the size is learned, before a byte lands (no .part).
    let n = nginx();
    let big = n.file(100 * MIB);
    let site = Site::new("bound", 4097);
    let spub = signify_key(site.dir.path(), "sf");
    let mpub = minisign_key(site.dir.path(), "mi");
    let ssig = site.dir.join("x.sig");
    signify_sign(&spub, &site.image(), &ssig);
    let msig = site.dir.join("x.minisig");
    minisign_sign(&mpub, &site.image(), &msig, true);
    for (sig, key) in [(&ssig, &spub), (&msig, &mpub)] {
        let out = site.dir.join(&big.name);
        let json = site.dir.join("bound.json");
        let o = site
            .dir
            .ringdl()
            .args(["-x", "4", "-o"])
            .arg(&out)
            .args(["--signature", s(sig), "--trusted-key", s(key), "--json", s(&json)])
            .arg(n.http_url(&big.name))
            .run();
        o.assert_code(exit::USAGE);
        let err = o.stderr_text();
        assert!(
            err.contains("64 MiB") && err.contains(&format!("{}", 100 * MIB)),
            "{err}"
        );
        assert!(!out.exists() && !part_path(&out).exists(), "bytes landed: {err}");
        let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert!(
            j["fetched"].as_u64().unwrap_or(0) < MIB,
            "the body was not fetched: {j}"
        );
    }
}

#[test]
fn pgp_clear_signed_sums_are_said_unchecked() {
    let site = Site::new("pgp", MIB + 1);
    let sums = site.dir.join("SHA256SUMS.asc");
    std::fs::write(
        &sums,
        format!(
            "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n{}  image.bin\n-----BEGIN PGP SIGNATURE-----\n\niQEzBAEBCAAdFiEE\n=abcd\n-----END PGP SIGNATURE-----\n",
            site.sha
        ),
    )
    .unwrap();
    let json = site.dir.join("pgp.json");
    let o = site
        .dir
        .ringdl()
        .args(["-o", s(&site.out()), "--checksum-file", s(&sums), "--json", s(&json)])
        .arg(site.url("image.bin"))
        .run();
    site.assert_landed(&o);
    let err = o.stderr_text();
    assert!(err.contains("PGP signature") && err.contains("NOT check"), "{err}");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["signature"]["format"], "openpgp", "{j}");
    assert_eq!(j["signature"]["verified"], false, "{j}");
}

/// A wrong `--trusted-key` is refused before the download (the signature names its key):
/// nothing of a large image is fetched for nothing; the right key then lands it. (The
/// refusal once came after the whole download, whose control file then went with it.)
#[test]
fn a_wrong_key_is_refused_before_a_byte_is_fetched() {
    let site = Site::new("later", 4 * MIB + 4097);
    let key = ssh_key(site.dir.path(), "signer", "ed25519");
    let other = ssh_key(site.dir.path(), "other", "ed25519");
    let sig = ssh_sign(&key, "file", &site.image());
    let requests = || nginx().access_log("/sig-later/image.bin ").len();
    let before = requests();
    let json = site.dir.join("wrong.json");
    let o = site.fetch(s(&sig), &[&other], &["--json", s(&json)]);
    site.assert_refused_before(&o);
    assert_eq!(requests(), before, "the image was asked for: {}", o.stderr_text());
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["signature"]["verified"], false, "{j}");
    assert_eq!(j["signature"]["key"], ssh_fingerprint(&key).as_str(), "{j}");
    let o = site.fetch(s(&sig), &[&key], &["-c"]);
    site.assert_landed(&o);
}

/// A minisign signature whose trusted comment was edited after signing (its signature
/// over the file still good) is refused: the global signature, over the signature and the
/// trusted comment, does not verify. Exit 10 naming the trusted comment, before a byte of
/// the image is asked for, no file at the output and `--json` says not verified. Made by
/// the real minisign (prehashed and legacy `-l`), served by nginx.
#[test]
fn a_minisign_trusted_comment_edited_after_signing_is_refused() {
    let site = Site::new("trusted-comment", MIB + 1);
    let key = minisign_key(site.dir.path(), "mi");
    let requests = || nginx().access_log("/sig-trusted-comment/image.bin ").len();
    for (legacy, name) in [(false, "image.bin.minisig"), (true, "image.bin.legacy.minisig")] {
        let sig = site.www.join(name);
        minisign_sign(&key, &site.image(), &sig, legacy);
        // As signed, it verifies.
        let o = site.fetch(&site.url(name), &[&key], &[]);
        site.assert_landed(&o);
        std::fs::remove_file(site.out()).unwrap();

        let text = std::fs::read_to_string(&sig).unwrap();
        let edited: String = text
            .lines()
            .map(|l| match l.strip_prefix("trusted comment: ") {
                Some(c) => format!("trusted comment: {c}\tchannel:stable\n"),
                None => format!("{l}\n"),
            })
            .collect();
        assert_ne!(edited, text, "no trusted comment in {name}:\n{text}");
        std::fs::write(&sig, &edited).unwrap();
        let before = requests();
        let json = site.dir.join("trusted.json");
        let o = site.fetch(&site.url(name), &[&key], &["--json", s(&json)]);
        let err = site.assert_refused_before(&o);
        assert!(
            err.contains("BAD signature: the trusted comment's global signature does not verify"),
            "legacy {legacy}: {err}"
        );
        assert_eq!(requests(), before, "legacy {legacy}: the image was asked for\n{err}");
        let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(
            (j["exit_code"].as_u64(), &j["signature"]["verified"]),
            (Some(10), &false.into()),
            "legacy {legacy}: {j}"
        );
    }
}
