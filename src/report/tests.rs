//! Unit tests of the notes' levels and texts, and of the progress line.

use super::*;

#[test]
fn warnings_show_with_q_details_need_v() {
    assert_eq!(Note::Shrunk.level(), Level::Warning);
    assert_eq!(Note::Resuming { have: 1, total: 2 }.level(), Level::Info);
    assert_eq!(Note::NoRanges.level(), Level::Verbose(1));
    assert_eq!(
        Note::Request {
            conn: 0,
            first: 0,
            last: 1
        }
        .level(),
        Level::Verbose(2)
    );
    assert_eq!(
        Note::Retry {
            conn: 2,
            why: "cut".into(),
            first: 0,
            last: 9,
            attempt: 2
        }
        .to_string(),
        "connection 2: cut; retrying bytes 0-9 (try 2)"
    );
}

/// A steady 1 MiB/s link whose bytes land in 512 KiB write blocks at irregular
/// moments, sampled by a 250 ms tick: the rate shown stays within 15 % of 1 MiB/s (a
/// per-tick 0.7/0.3 average swung between about 0.6 and 2.8 MiB/s).
#[test]
fn the_rate_of_a_steady_link_with_bursty_landings_is_steady() {
    const MIB: f64 = 1048576.0;
    let mut r = Rate::default();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut lo = f64::MAX;
    let mut hi = 0.0_f64;
    for tick in 1..=240 {
        let t = tick as f64 * 0.25;
        // Blocks land 0.5 s apart on average, each up to 0.4 s late.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let late = (seed % 400) as f64 / 1000.0;
        let landed = (((t - late).max(0.0) * MIB) as u64) / (512 * 1024) * (512 * 1024);
        let rate = r.update(landed, Duration::from_secs_f64(t));
        if t >= RATE_WINDOW {
            lo = lo.min(rate);
            hi = hi.max(rate);
        }
    }
    assert!(
        lo > 0.85 * MIB && hi < 1.15 * MIB,
        "{:.2}-{:.2} MiB/s",
        lo / MIB,
        hi / MIB
    );
}

#[test]
fn the_line_counts_resumed_bytes_and_the_eta_uses_the_rate() {
    let l = line(768 << 20, Some(1 << 30), 64.0 * 1048576.0, 4);
    assert!(
        l.starts_with(" 75.0% 768.0 MiB / 1.0 GiB  64.0 MiB/s  ETA 4s  4 conn"),
        "{l}"
    );
    assert_eq!(line(5, None, 0.0, 1), "5 B  0 B/s  1 conn");
}

#[test]
fn json_strings_are_escaped() {
    let mut s = String::new();
    super::push_json_string(&mut s, "a\"b\\c\nd\re\tf\u{1}g\u{7f}é");
    assert_eq!(s, r#""a\"b\\c\nd\re\tf\u0001g\u007fé""#);
    let r = super::Record {
        url: Some("http://h/\"x\"".to_owned()),
        bytes: Some(10),
        fetched: Some(5),
        seconds: Some(3.0),
        waited_seconds: Some(1.0),
        checksum_verified: Some(false),
        ..Default::default()
    };
    let j = r.to_json(9, Some("sha-256 mismatch"));
    assert!(j.starts_with(r#"{"urls":["http://h/\"x\""],"final_url":null,"#), "{j}");
    assert!(
        j.contains(r#""bytes":10,"fetched":5,"seconds":3.000000,"waited_seconds":1.000000,"rate":2.500000,"#),
        "{j}"
    );
    assert!(
        j.ends_with(
            r#""checksum_verified":false,"not_modified":false,"exit_code":9,"error":"sha-256 mismatch"}
"#
        ),
        "{j}"
    );
}

#[test]
fn the_reactors_line_counts_in_words() {
    let line = |reactors, others, parts, bytes| {
        let n = Note::Reactors {
            reactors,
            others,
            parts,
            bytes,
        };
        n.to_string()
    };
    assert_eq!(
        line(1, 1, 1, 0),
        "1 reactor: 1 part to the other thread, 0 bytes landed there"
    );
    assert_eq!(
        line(2, 3, 3, 9),
        "2 reactors: 3 parts to other threads, 9 bytes landed there"
    );
}

#[test]
fn human_units() {
    assert_eq!(super::human(17), "17 B");
    assert_eq!(super::human(1536), "1.5 KiB");
    assert_eq!(super::human(1 << 30), "1.0 GiB");
    assert_eq!(super::duration(3725.0), "1h02m");
}
