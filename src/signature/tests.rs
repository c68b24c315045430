//! Vectors made by the real tools (`testdata/`): ssh-keygen -Y sign (ed25519, ecdsa
//! P-256/P-384, rsa 2048), signify-openbsd -S, minisign -S and -S -l, all over msg.txt.

use super::*;

const MSG: &[u8] = include_bytes!("testdata/msg.txt");

fn keys(file: &[u8]) -> Vec<TrustedKey> {
    parse_keys(file).unwrap()
}

fn check(sig: &[u8], key: &[u8], msg: &[u8]) -> Result<Verified, Refused> {
    let s = parse(sig).unwrap();
    verify(&s, &keys(key), "file", &prehash(s.input(), msg).unwrap())
}

#[test]
fn sshsig_each_key_type_verifies_and_a_changed_byte_does_not() {
    let cases: [(&[u8], &[u8]); 4] = [
        (include_bytes!("testdata/msg.ed.sig"), include_bytes!("testdata/ed.pub")),
        (
            include_bytes!("testdata/msg.p256.sig"),
            include_bytes!("testdata/p256.pub"),
        ),
        (
            include_bytes!("testdata/msg.p384.sig"),
            include_bytes!("testdata/p384.pub"),
        ),
        (
            include_bytes!("testdata/msg.rsa.sig"),
            include_bytes!("testdata/rsa.pub"),
        ),
    ];
    let mut bad = MSG.to_vec();
    bad[0] ^= 1;
    for (sig, key) in cases {
        let v = check(sig, key, MSG).unwrap();
        assert_eq!(v.format, Format::Sshsig);
        assert!(v.key.starts_with("SHA256:"), "{}", v.key);
        assert_eq!(check(sig, key, &bad), Err(Refused::Bad(v.key.clone())));
        // Another key: unknown.
        let other: &[u8] = include_bytes!("testdata/ed.pub");
        if key != other {
            assert!(matches!(check(sig, other, MSG), Err(Refused::UnknownKey(_))));
        }
        // Round trip of the blob.
        let Signature::Sshsig(s) = parse(sig).unwrap() else {
            panic!()
        };
        assert_eq!(sshsig::parse_blob(&s.encode_blob()).unwrap(), s);
    }
}

#[test]
fn sshsig_fingerprint_is_ssh_keygens() {
    let Signature::Sshsig(s) = parse(include_bytes!("testdata/msg.ed.sig")).unwrap() else {
        panic!()
    };
    let line = std::str::from_utf8(include_bytes!("testdata/ed.pub")).unwrap();
    let TrustedKey::Ssh(k) = &keys(line.as_bytes())[0] else {
        panic!()
    };
    assert_eq!(k.blob, s.public_key);
    // ssh-keygen -lf ed.pub prints the same SHA256:… (checked when the vector was made).
    assert_eq!(sshsig::fingerprint(&k.blob).len(), "SHA256:".len() + 43);
}

#[test]
fn sshsig_namespace_and_allowed_signers() {
    let sig: &[u8] = include_bytes!("testdata/msg.ed.sig");
    let key = std::str::from_utf8(include_bytes!("testdata/ed.pub")).unwrap().trim();
    let s = parse(sig).unwrap();
    let h = prehash(s.input(), MSG).unwrap();
    let k = keys(key.as_bytes());
    assert!(matches!(verify(&s, &k, "git", &h), Err(Refused::Namespace { .. })));
    let allowed = format!("me@example.org namespaces=\"git,fi*\" {key}\n");
    assert_eq!(
        verify(&s, &keys(allowed.as_bytes()), "file", &h)
            .unwrap()
            .principals
            .as_deref(),
        Some("me@example.org")
    );
    let only_git = format!("me@example.org namespaces=\"git\" {key}\n");
    assert!(matches!(
        verify(&s, &keys(only_git.as_bytes()), "file", &h),
        Err(Refused::NotAllowed { .. })
    ));
    let ca = format!("* cert-authority {key}\n");
    assert!(matches!(
        verify(&s, &keys(ca.as_bytes()), "file", &h),
        Err(Refused::UnknownKey(_))
    ));
}

#[test]
fn sshsig_truncated_is_malformed() {
    let sig = include_str!("testdata/msg.ed.sig");
    for cut in [sig.len() / 2, sig.len() - 30, 40] {
        assert!(parse(&sig.as_bytes()[..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn signify_verifies_and_refuses() {
    let sig: &[u8] = include_bytes!("testdata/msg.signify.sig");
    let key: &[u8] = include_bytes!("testdata/sf.pub");
    let v = check(sig, key, MSG).unwrap();
    assert_eq!(v.format, Format::Signify);
    let mut bad = MSG.to_vec();
    bad[3] ^= 0x20;
    assert_eq!(check(sig, key, &bad), Err(Refused::Bad(v.key)));
    assert!(matches!(
        check(sig, include_bytes!("testdata/mi.pub"), MSG),
        Err(Refused::UnknownKey(_))
    ));
    let Signature::Signify(s) = parse(sig).unwrap() else {
        panic!()
    };
    assert_eq!(parse(s.encode().as_bytes()).unwrap(), Signature::Signify(s));
    let text = std::str::from_utf8(sig).unwrap();
    assert!(parse(&sig[..text.len() - 20]).is_err());
    assert!(parse(text.lines().next().unwrap().as_bytes()).is_err());
}

#[test]
fn minisign_both_forms_and_the_trusted_comment() {
    let key: &[u8] = include_bytes!("testdata/mi.pub");
    for (sig, prehashed) in [
        (&include_bytes!("testdata/msg.minisig")[..], true),
        (&include_bytes!("testdata/msg.legacy.minisig")[..], false),
    ] {
        let s = parse(sig).unwrap();
        assert_eq!(s.input() == Input::Blake2b512, prehashed);
        let v = check(sig, key, MSG).unwrap();
        assert_eq!((v.format, v.key.as_str()), (Format::Minisign, "35171E983D522BC4"));
        let mut bad = MSG.to_vec();
        bad[5] ^= 1;
        assert!(matches!(check(sig, key, &bad), Err(Refused::Bad(_))));
        // A changed trusted comment breaks the global signature.
        let text = std::str::from_utf8(sig).unwrap().replace("timestamp:", "timestamp:1");
        assert!(matches!(
            check(text.as_bytes(), key, MSG),
            Err(Refused::TrustedComment(_))
        ));
        let Signature::Minisign(m) = s else { panic!() };
        assert_eq!(parse(m.encode().as_bytes()).unwrap(), Signature::Minisign(m));
        let lines: Vec<&str> = std::str::from_utf8(sig).unwrap().lines().collect();
        assert!(parse(lines[..3].join("\n").as_bytes()).is_err(), "no global signature");
    }
}

#[test]
fn keys_and_framing_are_detected() {
    assert!(parse(b"hello").is_err());
    assert!(parse_keys(b"").is_err());
    assert!(parse_keys(b"# only a comment\n").is_err());
    assert!(matches!(
        &keys(b"RWTEK1I9mB4XNTSOKPurudTIdhPdxnSI4U9CMRHeFQwIK9MGFwik7hA/")[0],
        TrustedKey::Ed(_)
    ));
    assert!(parse_keys(b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH/M").is_err());
}

#[test]
fn prehash_matches_the_algorithms() {
    assert_eq!(
        hex(&prehash(Input::Sha256, b"abc").unwrap()),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    // RFC 7693 Appendix A: BLAKE2b-512("abc").
    assert!(hex(&prehash(Input::Blake2b512, b"abc").unwrap()).starts_with("ba80a53f981c4d0d6a2797b69f12f6e9"));
    assert_eq!(prehash(Input::Message, b"abc").as_deref(), Some(&b"abc"[..]));
    let mut big = Prehasher::new(Input::Message);
    big.update(&vec![0; MAX_MESSAGE as usize]);
    big.update(b"x");
    assert!(big.finish().is_none(), "a message over the bound is dropped, not held");
}

/// The committed fuzz seeds (`fuzz/corpus/signature_*`) hold their properties
/// (`fuzz/props.rs`): round trips, keys from their lines.
#[test]
fn fuzz_corpora_replay() {
    crate::replay_corpus("signature_sshsig", crate::fuzz_props::signature_sshsig);
    crate::replay_corpus("signature_signify", crate::fuzz_props::signature_signify);
    crate::replay_corpus("signature_minisign", crate::fuzz_props::signature_minisign);
    crate::replay_corpus("signature_keys", crate::fuzz_props::signature_keys);
}

/// Key ids read as minisign prints them in its `.pub` comment: no leading zeros (a fresh
/// user's key `1C8B927AED7EE23` once read `01C8B927AED7EE23`).
#[test]
fn key_ids_read_as_minisign_prints_them() {
    let id = 0x01C8_B927_AED7_EE23u64.to_le_bytes();
    assert_eq!(super::key_id(&id), "1C8B927AED7EE23");
    assert_eq!(
        super::key_id(&0x3517_1E98_3D52_2BC4u64.to_le_bytes()),
        "35171E983D522BC4"
    );
}
