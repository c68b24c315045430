//! The text header of a zsync control file: `Key: value` lines up to an empty line.
//!
//! Rules from zsync 0.6.2's `zsync_begin` (`c/libzsync/zsync.c`): a line is `Key: value`
//! (the first `:` followed by a space), trailing `\r`, `\n` and spaces are dropped, the
//! header ends at a line that is exactly `\n`; a key the client does not know is refused
//! unless a `Safe:` header lists it; `zsync: 0.0.4` and a `Min-Version:` above 0.6.2 are
//! refused. Also read, from the current format (`SPEC.md` of zsync 0.8):
//! `Strong-Hash-Algorithm: MD4` and `File-Hash: SHA-1:…` / `SHA-256:…`; a `SHA-256:`
//! line is read like `SHA-1:`.
//!
//! Stricter than zsync 0.6.2, which reads what it can: the first line must be `zsync:`
//! (as `SPEC.md` says), a single-valued header given twice, a number with other than
//! digits and a digest of the wrong length or not hex are refused (zsync takes the last,
//! `atoi`'s prefix, and ignores a bad `SHA-1:`, skipping the final check); gzip mode
//! (`Z-URL:`, `Z-Map2:`, `Recompress:`) is refused, even when `Safe:` lists it; `Safe:`
//! may come after the header it lists (zsync 0.6.2 reads it in order; `SPEC.md` says order
//! does not matter), its names split at spaces or commas.

/// The version of the format this reader implements (a `Min-Version:` above it is refused).
const VERSION: &str = "0.6.2";

/// The largest `Blocksize:` accepted, bytes: a scanner holds about three blocks of seed.
pub const MAX_BLOCK_SIZE: u64 = 1 << 24;

/// What the header says. Lengths in bytes.
#[derive(Debug, Default)]
pub struct Header {
    /// `Filename:`, as given.
    pub filename: Option<String>,
    /// `MTime:` (RFC 1123), as given.
    pub mtime: Option<String>,
    /// Every `URL:`, in file order.
    pub urls: Vec<String>,
    /// `Blocksize:` (a power of two, 1 ..= [`MAX_BLOCK_SIZE`]).
    pub block_size: u64,
    /// `Length:`, the target's size.
    pub length: u64,
    /// `Hash-Lengths:` first field: how many consecutive blocks must match (1 or 2).
    pub seq_matches: u8,
    /// `Hash-Lengths:` second field: bytes of the rolling sum stored per block (1..=4).
    pub rsum_bytes: u8,
    /// `Hash-Lengths:` third field: bytes of MD4 stored per block (3..=16).
    pub checksum_bytes: u8,
    /// `SHA-1:` (or `File-Hash: SHA-1:`), decoded.
    pub sha1: Option<[u8; 20]>,
    /// `SHA-256:` (or `File-Hash: SHA-256:`), decoded.
    pub sha256: Option<[u8; 32]>,
}

/// Parses the header of `control`; returns it and the offset of the block sums (just
/// after the empty line).
///
/// # Errors
/// A message naming the line and what is wrong: no `zsync:` first, a line that is not
/// `Key: value`, a bad number, a missing `Blocksize:`/`Length:`, a header the format
/// refuses (gzip mode: `Z-URL`, `Z-Map2`, `Recompress`), an unknown one not listed in
/// `Safe:`, or a header that does not end.
pub fn parse(control: &[u8]) -> Result<(Header, usize), String> {
    let mut h = Header {
        seq_matches: 1,
        rsum_bytes: 4,
        checksum_bytes: 16,
        ..Header::default()
    };
    let mut seen = Seen::default();
    let mut safe: Vec<String> = Vec::new();
    let mut unknown: Vec<(usize, String)> = Vec::new();
    let mut pos = 0;
    let mut line_no = 0;
    loop {
        line_no += 1;
        let rest = &control[pos..];
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            return Err(if line_no == 1 && rest.is_empty() {
                "zsync control file: empty".to_owned()
            } else {
                format!("zsync control file: truncated in the header at line {line_no} (no empty line ends it)")
            });
        };
        pos += nl + 1;
        if nl == 0 {
            if line_no == 1 {
                return Err("zsync control file: line 1 is empty (no \"zsync:\" header)".to_owned());
            }
            break;
        }
        let raw = &rest[..nl];
        let end = raw
            .iter()
            .rposition(|&b| !matches!(b, b'\r' | b' '))
            .map_or(0, |i| i + 1);
        let line =
            std::str::from_utf8(&raw[..end]).map_err(|_| format!("zsync control file, line {line_no}: not UTF-8"))?;
        let Some((key, value)) = line.split_once(':').and_then(|(k, v)| Some((k, v.strip_prefix(' ')?))) else {
            return Err(if line_no == 1 {
                "not a zsync control file: line 1 is not \"zsync: VERSION\"".to_owned()
            } else {
                format!("zsync control file, line {line_no}: not \"Key: value\": {}", clip(line))
            });
        };
        if line_no == 1 && key != "zsync" {
            return Err(format!(
                "not a zsync control file: line 1 is \"{}:\", not \"zsync:\"",
                clip(key)
            ));
        }
        let at = |what: String| format!("zsync control file, line {line_no} ({}): {what}", clip(key));
        match field(&mut h, &mut seen, key, value).map_err(at)? {
            Field::Known => {}
            Field::Safe(list) => safe.extend(list),
            Field::Unknown => unknown.push((line_no, key.to_owned())),
        }
    }
    if let Some((n, key)) = unknown.iter().find(|(_, k)| !safe.iter().any(|s| s == k)) {
        return Err(format!(
            "zsync control file, line {n}: unknown header \"{}\" (not listed in a \"Safe:\" header): \
             made for a newer zsync",
            clip(key)
        ));
    }
    if !seen.block_size || !seen.length {
        return Err(format!(
            "zsync control file: no {} header",
            if seen.block_size { "Length:" } else { "Blocksize:" }
        ));
    }
    Ok((h, pos))
}

/// Which single-valued headers were seen (a second one is refused).
#[derive(Default)]
struct Seen {
    version: bool,
    block_size: bool,
    length: bool,
    hash_lengths: bool,
    filename: bool,
    mtime: bool,
}

/// What a header line was.
enum Field {
    /// Read into the header.
    Known,
    /// `Safe:`: the names it lists.
    Safe(Vec<String>),
    /// A name this reader does not know.
    Unknown,
}

/// Reads one `key: value` into `h`.
fn field(h: &mut Header, seen: &mut Seen, key: &str, value: &str) -> Result<Field, String> {
    match key {
        "zsync" => {
            once(&mut seen.version)?;
            if value == "0.0.4" {
                return Err("zsync 0.0.4 control files are not supported".to_owned());
            }
        }
        "Min-Version" => {
            if value > VERSION {
                return Err(format!("needs zsync {} or newer (this reader: {VERSION})", clip(value)));
            }
        }
        "Blocksize" => {
            once(&mut seen.block_size)?;
            h.block_size = decimal(value)?;
            if !h.block_size.is_power_of_two() || h.block_size > MAX_BLOCK_SIZE {
                return Err(format!(
                    "{} is not a power of two from 1 to {MAX_BLOCK_SIZE}",
                    h.block_size
                ));
            }
        }
        "Length" => {
            once(&mut seen.length)?;
            h.length = decimal(value)?;
        }
        "Hash-Lengths" => {
            once(&mut seen.hash_lengths)?;
            hash_lengths(h, value)?;
        }
        "Filename" => {
            once(&mut seen.filename)?;
            h.filename = Some(value.to_owned());
        }
        "MTime" => {
            once(&mut seen.mtime)?;
            h.mtime = Some(value.to_owned());
        }
        "URL" => h.urls.push(value.to_owned()),
        "SHA-1" => set_digest(&mut h.sha1, value)?,
        "SHA-256" => set_digest(&mut h.sha256, value)?,
        "File-Hash" => match value.split_once(':') {
            Some(("SHA-1", hex)) => set_digest(&mut h.sha1, hex)?,
            Some(("SHA-256", hex)) => set_digest(&mut h.sha256, hex)?,
            _ => return Err(format!("{}: not SHA-1:HEX or SHA-256:HEX", clip(value))),
        },
        "Strong-Hash-Algorithm" => {
            if value != "MD4" {
                return Err(format!("block sums by {}: not supported (MD4 only)", clip(value)));
            }
        }
        "Z-URL" | "Z-Map2" | "Recompress" => {
            return Err("gzip mode (a compressed download mapped to the target): not supported".to_owned());
        }
        "Safe" => {
            let names = value
                .split([' ', ','])
                .map(|s| s.trim_end_matches(':'))
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            return Ok(Field::Safe(names));
        }
        _ => return Ok(Field::Unknown),
    }
    Ok(Field::Known)
}

/// `seq_matches,rsum_bytes,checksum_bytes` with zsync 0.6.2's ranges.
fn hash_lengths(h: &mut Header, value: &str) -> Result<(), String> {
    let mut it = value.split(',');
    let mut next = |lo: u64, hi: u64, what: &str| -> Result<u8, String> {
        let n = it
            .next()
            .ok_or_else(|| format!("{}: three numbers expected", clip(value)))?;
        let n = decimal(n)?;
        if !(lo..=hi).contains(&n) {
            return Err(format!("{}: {what} {n} is not in {lo}..={hi}", clip(value)));
        }
        Ok(n as u8)
    };
    h.seq_matches = next(1, 2, "seq_matches")?;
    h.rsum_bytes = next(1, 4, "rsum_bytes")?;
    h.checksum_bytes = next(3, 16, "checksum_bytes")?;
    if it.next().is_some() {
        return Err(format!("{}: three numbers expected", clip(value)));
    }
    Ok(())
}

/// Refuses a second occurrence of a single-valued header.
fn once(seen: &mut bool) -> Result<(), String> {
    if std::mem::replace(seen, true) {
        return Err("given twice".to_owned());
    }
    Ok(())
}

/// A decimal number, digits only.
fn decimal(s: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{}: not a decimal number", clip(s)));
    }
    s.parse().map_err(|_| format!("{}: too large", clip(s)))
}

/// A digest in hex (either case), `N` bytes; a second one is refused.
fn set_digest<const N: usize>(slot: &mut Option<[u8; N]>, hex: &str) -> Result<(), String> {
    if slot.is_some() {
        return Err("digest given twice".to_owned());
    }
    let b = hex.as_bytes();
    if b.len() != 2 * N {
        return Err(format!("{}: not {} hex digits", clip(hex), 2 * N));
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        match (digit(pair[0]), digit(pair[1])) {
            (Some(hi), Some(lo)) => *o = hi << 4 | lo,
            _ => return Err(format!("{}: not hex", clip(hex))),
        }
    }
    *slot = Some(out);
    Ok(())
}

/// At most 60 characters of `s`, for messages.
fn clip(s: &str) -> String {
    let mut c: String = s.chars().take(60).collect();
    if c.len() < s.len() {
        c.push('…');
    }
    let quoted = format!("{c:?}");
    quoted[1..quoted.len() - 1].to_owned()
}
