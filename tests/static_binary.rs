//! The release musl binary is a static ELF that runs on a bare host.
//!
//! `scripts/test.sh` builds it (`cargo build --release --target
//! x86_64-unknown-linux-musl`) and sets `RINGDL_STATIC_BIN`; without that variable the
//! test builds it itself into `target/nested` ([`crate::util::cargo_build`]).

use std::fs;
use std::process::Command;

/// `PT_INTERP` (elf(5)): the program asks for a dynamic loader.
const PT_INTERP: u32 = 3;
/// `EM_X86_64` (elf(5)).
const EM_X86_64: u16 = 62;

/// Program header types of an ELF64 little-endian file.
///
/// Parses only what it needs (elf(5)): `e_ident`, `e_machine`, `e_phoff`,
/// `e_phentsize`, `e_phnum`, then `p_type` of each program header.
fn program_header_types(image: &[u8]) -> Result<(u16, Vec<u32>), String> {
    let u16_at = |off: usize| -> Result<u16, String> {
        image
            .get(off..off + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .ok_or_else(|| format!("truncated at byte {off}"))
    };
    let u32_at = |off: usize| -> Result<u32, String> {
        image
            .get(off..off + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .ok_or_else(|| format!("truncated at byte {off}"))
    };
    let u64_at = |off: usize| -> Result<u64, String> {
        image
            .get(off..off + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .ok_or_else(|| format!("truncated at byte {off}"))
    };
    if image.get(..4) != Some(b"\x7fELF") {
        return Err("no ELF magic".into());
    }
    if image[4] != 2 || image[5] != 1 {
        return Err(format!(
            "not ELF64 little-endian (class {}, data {})",
            image[4], image[5]
        ));
    }
    let machine = u16_at(0x12)?;
    let phoff = usize::try_from(u64_at(0x20)?).map_err(|e| e.to_string())?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    if phentsize < 4 {
        return Err(format!("e_phentsize {phentsize} too small"));
    }
    let types = (0..phnum)
        .map(|i| u32_at(phoff + i * phentsize))
        .collect::<Result<_, _>>()?;
    Ok((machine, types))
}

#[test]
fn elf_parser_sees_the_interpreter_of_this_dynamic_test_binary() {
    // This test executable is linked against glibc: it must have PT_INTERP, or the
    // static check below proves nothing.
    let exe = std::env::current_exe().unwrap();
    let (machine, types) = program_header_types(&fs::read(&exe).unwrap()).unwrap();
    assert_eq!(machine, EM_X86_64);
    assert!(
        types.contains(&PT_INTERP),
        "{} has no PT_INTERP: {types:?}",
        exe.display()
    );
    assert!(program_header_types(b"#!/bin/sh\n").is_err());
}

#[test]
fn release_musl_binary_is_static_and_runs() {
    // scripts/test.sh builds it and sets RINGDL_STATIC_BIN; else it is built here, as
    // scripts/lib.sh's build_static does, into a target directory of its own.
    let bin = match std::env::var_os("RINGDL_STATIC_BIN") {
        Some(b) => std::path::PathBuf::from(b),
        None => {
            const MUSL: &str = "x86_64-unknown-linux-musl";
            if !crate::util::have_program("musl-gcc") {
                crate::util::skip("musl-gcc missing (Debian: musl-tools); ./scripts/test.sh installs it");
                return;
            }
            let target = crate::util::cargo_build(
                &["--target", MUSL, "-p", "ringdl", "--bin", "ringdl"],
                &[("CC_x86_64_unknown_linux_musl", "musl-gcc")],
            );
            target.join(MUSL).join("release/ringdl")
        }
    };
    let bin = bin.as_path();
    let image = fs::read(bin).unwrap_or_else(|e| panic!("reading {}: {e}", bin.display()));
    let (machine, types) = program_header_types(&image).unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    assert_eq!(machine, EM_X86_64, "{} is not x86-64", bin.display());
    // static-pie keeps PT_DYNAMIC (for self-relocation) but never asks for a loader.
    assert!(
        !types.contains(&PT_INTERP),
        "{} has PT_INTERP: it needs a dynamic loader, not static",
        bin.display()
    );
    // What appliances and rescue images carry: stripped, at most 3.5 MiB (the design
    // card's limit; debug info lives in `cargo build --profile profiling`).
    assert!(
        image.len() <= 7 << 19,
        "{} is {} bytes: the release binary must be stripped and at most 3.5 MiB",
        bin.display(),
        image.len()
    );
    assert!(
        !image.windows(12).any(|w| w == b".debug_info\0") && !image.windows(8).any(|w| w == b".symtab\0"),
        "{} carries .symtab or .debug_info: not stripped",
        bin.display()
    );
    let out = Command::new(bin)
        .arg("--version")
        .env_clear()
        .output()
        .unwrap_or_else(|e| panic!("running {} --version: {e}", bin.display()));
    assert!(
        out.status.success(),
        "{} --version: {}\n{}",
        bin.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ringdl"),
        "--version does not name ringdl: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
