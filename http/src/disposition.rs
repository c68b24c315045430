//! File names from `Content-Disposition` (RFC 6266, RFC 8187) and their sanitizing.

use crate::fields::trim_ows;
use crate::response::is_tchar;
use crate::url::percent_decode;

/// Longest file name produced, in bytes (the usual `NAME_MAX`).
const MAX_NAME: usize = 255;

/// The file name a `Content-Disposition` value suggests (RFC 6266 §4.3), sanitized
/// with [`sanitize_file_name`]; `None` when there is none or nothing usable is left.
///
/// `filename*=` (RFC 8187 ext-value, charset `UTF-8` or `ISO-8859-1`,
/// percent-encoded) is preferred over `filename=`. A `filename=` value is a token or
/// quoted-string (backslash escapes undone); its bytes are read as UTF-8 when valid,
/// else as ISO-8859-1. Parameter names are case-insensitive; the first of each wins.
/// Unquoted values with spaces (a common server bug) are taken up to the next `;`.
pub fn content_disposition_filename(value: &[u8]) -> Option<String> {
    let semi = value.iter().position(|&b| b == b';')?;
    let mut rest = &value[semi + 1..];
    let mut plain: Option<Vec<u8>> = None;
    let mut extended: Option<Vec<u8>> = None;
    loop {
        rest = trim_start(rest);
        if rest.is_empty() {
            break;
        }
        let name_end = rest.iter().position(|&b| !is_tchar(b)).unwrap_or(rest.len());
        let name = &rest[..name_end];
        rest = trim_start(&rest[name_end..]);
        let param_value = match rest.strip_prefix(b"=") {
            Some(after) if !name.is_empty() => {
                let (v, after) = parse_value(trim_start(after));
                rest = after;
                Some(v)
            }
            _ => None,
        };
        // Skip to the next parameter.
        match rest.iter().position(|&b| b == b';') {
            Some(i) => rest = &rest[i + 1..],
            None => rest = b"",
        }
        let Some(v) = param_value else { continue };
        if name.eq_ignore_ascii_case(b"filename*") {
            extended.get_or_insert(v);
        } else if name.eq_ignore_ascii_case(b"filename") {
            plain.get_or_insert(v);
        }
    }
    extended
        .and_then(|v| decode_ext_value(&v))
        .and_then(|name| sanitize_file_name(&name))
        .or_else(|| sanitize_file_name(&bytes_to_string(&plain?)))
}

/// A parameter value (quoted-string or token) and the input after it.
fn parse_value(s: &[u8]) -> (Vec<u8>, &[u8]) {
    let mut out = Vec::new();
    if let Some(quoted) = s.strip_prefix(b"\"") {
        let mut i = 0;
        while i < quoted.len() {
            match quoted[i] {
                b'"' => return (out, &quoted[i + 1..]),
                b'\\' if i + 1 < quoted.len() => {
                    out.push(quoted[i + 1]);
                    i += 2;
                }
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        // Unterminated: take what is there.
        return (out, b"");
    }
    let end = s.iter().position(|&b| b == b';').unwrap_or(s.len());
    out.extend_from_slice(trim_ows(&s[..end]));
    (out, &s[end..])
}

/// RFC 8187 §3.2 `ext-value = charset "'" [ language ] "'" value-chars`.
fn decode_ext_value(v: &[u8]) -> Option<String> {
    let mut parts = v.splitn(3, |&b| b == b'\'');
    let charset = parts.next()?;
    let _language = parts.next()?;
    let encoded = parts.next()?;
    let bytes = percent_decode(encoded);
    if charset.eq_ignore_ascii_case(b"utf-8") {
        String::from_utf8(bytes).ok()
    } else if charset.eq_ignore_ascii_case(b"iso-8859-1") {
        Some(latin1(&bytes))
    } else {
        None
    }
}

fn bytes_to_string(b: &[u8]) -> String {
    match core::str::from_utf8(b) {
        Ok(s) => s.to_owned(),
        Err(_) => latin1(b),
    }
}

fn latin1(b: &[u8]) -> String {
    b.iter().map(|&b| char::from(b)).collect()
}

fn trim_start(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    s
}

/// Makes `name` safe to create in the output directory: keeps the base name only
/// (after the last `/` or `\`), replaces control characters with `_`, trims
/// surrounding whitespace and leading dots (no hidden files, no `.` or `..`), and
/// cuts to 255 bytes on a character boundary, keeping an extension of up to 16
/// bytes. `None` when nothing is left.
pub fn sanitize_file_name(name: &str) -> Option<String> {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let cleaned: String = base.chars().map(|c| if c.is_control() { '_' } else { c }).collect();
    // Dots and spaces in any mix (". ..") must all go, or ".." and hidden names survive.
    let trimmed = cleaned
        .trim()
        .trim_start_matches(|c: char| c == '.' || c.is_whitespace());
    if trimmed.is_empty() {
        return None;
    }
    if trimmed.len() <= MAX_NAME {
        return Some(trimmed.to_owned());
    }
    let ext = match trimmed.rfind('.') {
        Some(dot) if dot > 0 && trimmed.len() - dot <= 16 => &trimmed[dot..],
        _ => "",
    };
    let mut cut = MAX_NAME - ext.len();
    while !trimmed.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = String::with_capacity(MAX_NAME);
    out.push_str(trimmed[..cut].trim_end());
    out.push_str(ext);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzzing (fuzz/corpus/disposition/finding_dotdot): dots and spaces mixed at
    /// the front left "..", "." or a hidden name; a cut long name kept a trailing space.
    #[test]
    fn regression_dots_and_spaces_never_make_dot_names() {
        for bad in [". ..", ". .", "a/. ..", ". .x", ".\u{3000}.."] {
            let got = sanitize_file_name(bad);
            assert!(got.as_deref().is_none_or(|n| !n.starts_with('.')), "{bad:?} -> {got:?}");
        }
        let long = format!("{} b", "a".repeat(254));
        let once = sanitize_file_name(&long).unwrap();
        assert_eq!(sanitize_file_name(&once).as_deref(), Some(once.as_str()));
        assert!(!once.ends_with(' '));
    }

    fn cd(v: &str) -> Option<String> {
        content_disposition_filename(v.as_bytes())
    }

    #[test]
    fn plain_filename() {
        assert_eq!(cd("attachment; filename=a.zip").as_deref(), Some("a.zip"));
        assert_eq!(cd("attachment; filename=\"a b.zip\"").as_deref(), Some("a b.zip"));
        assert_eq!(cd("ATTACHMENT; FILENAME = x.bin ; size=3").as_deref(), Some("x.bin"));
        assert_eq!(cd("attachment; filename=my file.zip").as_deref(), Some("my file.zip"));
        assert_eq!(
            cd("attachment; filename=\"unterminated.zip").as_deref(),
            Some("unterminated.zip")
        );
        assert_eq!(cd("inline; size=5; filename=\"x;y.txt\"").as_deref(), Some("x;y.txt"));
        assert_eq!(cd("attachment; filename=a; filename=b").as_deref(), Some("a"));
    }

    #[test]
    fn quoted_escapes() {
        assert_eq!(cd(r#"attachment; filename="a\"b.zip""#).as_deref(), Some("a\"b.zip"));
        // A backslash is a path separator once unescaped: only the base name stays.
        assert_eq!(cd(r#"attachment; filename="dir\\x.zip""#).as_deref(), Some("x.zip"));
    }

    #[test]
    fn extended_preferred() {
        assert_eq!(
            cd("attachment; filename=\"fallback.txt\"; filename*=UTF-8''%E2%82%AC%20rates.txt").as_deref(),
            Some("\u{20ac} rates.txt")
        );
        assert_eq!(
            cd("attachment; filename*=utf-8'en'na%C3%AFve.txt; filename=x").as_deref(),
            Some("na\u{ef}ve.txt")
        );
        assert_eq!(
            cd("attachment; filename*=iso-8859-1''%E9t%E9.txt").as_deref(),
            Some("\u{e9}t\u{e9}.txt")
        );
        // Unusable extended value falls back to filename=.
        assert_eq!(
            cd("attachment; filename*=UTF-8''%FF.txt; filename=ok.txt").as_deref(),
            Some("ok.txt")
        );
        assert_eq!(
            cd("attachment; filename*=koi8-r''x; filename=ok").as_deref(),
            Some("ok")
        );
        assert_eq!(cd("attachment; filename*=nonsense; filename=ok").as_deref(), Some("ok"));
        assert_eq!(
            cd("attachment; filename*=UTF-8''..%2F..%2Fpasswd").as_deref(),
            Some("passwd")
        );
        assert_eq!(
            cd("attachment; filename*=UTF-8''..; filename=ok").as_deref(),
            Some("ok")
        );
    }

    #[test]
    fn non_utf8_plain_is_latin1() {
        assert_eq!(
            content_disposition_filename(b"attachment; filename=\"\xe9.txt\"").as_deref(),
            Some("\u{e9}.txt")
        );
        assert_eq!(
            content_disposition_filename("attachment; filename=\"\u{e9}.txt\"".as_bytes()).as_deref(),
            Some("\u{e9}.txt")
        );
    }

    #[test]
    fn no_filename() {
        assert_eq!(cd("attachment"), None);
        assert_eq!(cd("inline"), None);
        assert_eq!(cd(""), None);
        assert_eq!(cd("attachment; size=3"), None);
        assert_eq!(cd("attachment; filename="), None);
        assert_eq!(cd("attachment; filename=\"\""), None);
        assert_eq!(cd("attachment; =x; filename"), None);
        assert_eq!(cd("attachment; filename=\"../..\""), None);
    }

    #[test]
    fn sanitize() {
        assert_eq!(sanitize_file_name("a.zip").as_deref(), Some("a.zip"));
        assert_eq!(sanitize_file_name("../x").as_deref(), Some("x"));
        assert_eq!(sanitize_file_name("a/b").as_deref(), Some("b"));
        assert_eq!(sanitize_file_name("a\\b").as_deref(), Some("b"));
        assert_eq!(sanitize_file_name("C:\\Windows\\evil.exe").as_deref(), Some("evil.exe"));
        assert_eq!(sanitize_file_name("/etc/passwd").as_deref(), Some("passwd"));
        assert_eq!(sanitize_file_name(".bashrc").as_deref(), Some("bashrc"));
        assert_eq!(sanitize_file_name("...x").as_deref(), Some("x"));
        assert_eq!(sanitize_file_name(" . x ").as_deref(), Some("x"));
        assert_eq!(sanitize_file_name("a\nb\0c\u{7f}\u{85}").as_deref(), Some("a_b_c__"));
        assert_eq!(sanitize_file_name(""), None);
        assert_eq!(sanitize_file_name("."), None);
        assert_eq!(sanitize_file_name(".."), None);
        assert_eq!(sanitize_file_name("a/"), None);
        assert_eq!(sanitize_file_name("   "), None);
        assert_eq!(sanitize_file_name("a/ .. "), None);
    }

    #[test]
    fn sanitize_length_limit() {
        let long = format!("{}.tar.gz", "a".repeat(400));
        let out = sanitize_file_name(&long).unwrap();
        assert_eq!(out.len(), 255);
        assert!(out.ends_with("a.gz"));
        let exact = "b".repeat(255);
        assert_eq!(sanitize_file_name(&exact).as_deref(), Some(exact.as_str()));
        // Multi-byte characters are never split.
        let wide = "\u{20ac}".repeat(100); // 300 bytes
        let out = sanitize_file_name(&wide).unwrap();
        assert!(out.len() <= 255 && out.len() > 250);
        assert!(out.chars().all(|c| c == '\u{20ac}'));
        // A long "extension" is not kept.
        let long_ext = format!("x.{}", "e".repeat(300));
        assert_eq!(sanitize_file_name(&long_ext).unwrap().len(), 255);
    }

    /// Cases mutation testing found unpinned.
    #[test]
    fn parameters_start_after_the_first_semicolon() {
        let f = |v: &[u8]| content_disposition_filename(v);
        // No `;`: no parameters at all, whatever follows.
        assert_eq!(f(b"xfilename=a.bin"), None);
        // A `;` first is fine.
        assert_eq!(f(b";filename=a.bin").as_deref(), Some("a.bin"));
        // After a quoted value, the rest up to the next `;` is skipped, not re-read.
        assert_eq!(f(b"attachment; x=\"1\"ffilename=a.bin"), None);
        // An unterminated quoted string ending in a backslash: no escape past the end.
        assert_eq!(f(b"attachment; filename=\"abc\\"), None);
        assert_eq!(f(b"attachment; filename=\"ab\\c").as_deref(), Some("abc"));
    }

    #[test]
    fn long_names_keep_short_extensions_only_and_cut_on_a_char_boundary() {
        // A 20-byte extension is not an extension worth keeping.
        let name = format!("{}.{}", "a".repeat(280), "b".repeat(19));
        assert_eq!(sanitize_file_name(&name), Some("a".repeat(255)));
        // Byte 255 falls inside a 2-byte character: cut before it.
        let name = format!("{}{}", "a".repeat(254), "é".repeat(30));
        assert_eq!(sanitize_file_name(&name), Some("a".repeat(254)));
    }
}
