//! `--limit-rate`: the whole download (all connections) paced to the rate, measured on
//! the real binary against the nginx fixture; bytes compared by SHA-256.

use std::time::Instant;

use crate::util::{MIB, TestDir, assert_same_bytes, nginx};

/// Downloads `size` bytes at `limit` bytes/s and returns the average rate, bytes/s.
fn paced(test: &str, https: bool, conns: u32, limit: &str) -> (f64, String) {
    let n = nginx();
    let file = n.file(4 * MIB);
    let dir = TestDir::new(test);
    let out = dir.join("out.bin");
    let mut cmd = dir.ringdl();
    cmd.args(["-x", &conns.to_string(), "--limit-rate", limit, "--ca-certificate"])
        .arg(n.ca_pem())
        .arg("-o")
        .arg(&out);
    cmd.arg(if https {
        n.https_url(&file.name)
    } else {
        n.http_url(&file.name)
    });
    let t = Instant::now();
    let o = cmd.run();
    let wall = t.elapsed().as_secs_f64();
    o.assert_success();
    assert_same_bytes(&out, file);
    (file.size as f64 / wall, o.stderr_text())
}

#[test]
fn limit_rate_paces_the_whole_download_across_connections() {
    // (https, connections, limit, bytes/s): 4 MiB each, about 2 to 4 s.
    for (https, conns, limit, rate) in [
        (false, 4, "1M", MIB),
        (true, 4, "1536K", 3 * MIB / 2),
        (false, 1, "2M", 2 * MIB),
        (true, 16, "2m", 2 * MIB),
    ] {
        let (got, err) = paced("limit_rate", https, conns, limit);
        let ratio = got / rate as f64;
        eprintln!("https={https} -x {conns} --limit-rate {limit}: {got:.0} B/s = {ratio:.3} x the limit");
        // A bound, generous for a loaded machine: the bucket starts with 0.1 s of burst.
        assert!(
            (0.7..=1.15).contains(&ratio),
            "https={https} -x {conns} --limit-rate {limit}: {got:.0} B/s = {ratio:.2} x the limit\n{err}"
        );
    }
}
