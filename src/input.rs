//! `-i FILE`: a list of files to fetch in one run, in aria2c's input-file format
//! (aria2c(1), "Input File"): a line of one or more TAB-separated URLs — mirrors of one
//! file — followed by option lines for that file, each starting with SPACE or TAB and
//! holding one `key=value`. Blank lines and lines starting with `#` are skipped.
//!
//! The options taken (aria2c's names where aria2c has one):
//!
//! | key | meaning |
//! | --- | --- |
//! | `out=NAME` | the file name, relative to the entry's directory (no `..`, not absolute) |
//! | `dir=DIR` | the directory the file goes to (over `-d`) |
//! | `checksum=sha-256=HEX` | expected digest (`sha-512=` too), as `--checksum` |
//! | `header=Name: value` | an extra request field, repeatable, checked as `-H` |
//! | `connections=N` | most connections for this file, 1–64 (over `-x`) |
//!
//! A URL may carry `user:password@` (taken out as on the command line, sent only to that
//! URL's origin). Pure: the bytes come in, entries or the first malformed line come out;
//! nothing is fetched, opened or created here. The whole list is checked before any
//! request.

use std::path::{Component, Path, PathBuf};

use crate::config::{Checksum, MAX_CONNECTIONS};
use crate::err;
use crate::error::Result;

/// One file of the list: its URLs and the options that followed them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// 1-based line number of the URL line (for messages).
    pub line: usize,
    /// The URLs as written (userinfo included), in the order given: the first names the
    /// file, the others are mirrors. At least one.
    pub urls: Vec<String>,
    /// `out=`: the file name, relative (checked: no `..`, not absolute, not empty).
    pub out: Option<PathBuf>,
    /// `dir=`: where the file goes.
    pub dir: Option<PathBuf>,
    /// `checksum=ALG=HEX`.
    pub checksum: Option<Checksum>,
    /// `header=Name: value`, in order, each checked by [`http::check_field`].
    pub headers: Vec<(String, String)>,
    /// `connections=N`, 1..=[`MAX_CONNECTIONS`].
    pub connections: Option<usize>,
}

/// Parses the list `bytes` read from `source` (a path, or "standard input", for messages).
/// Lines end in LF or CRLF; a UTF-8 byte-order mark may open the first.
///
/// # Errors
/// [`crate::error::Kind::Usage`] naming `source` and the 1-based line of the first
/// malformed line: bytes that are not UTF-8, an option line before any URL, a line that
/// is not `key=value`, an unknown key, a key given twice for one file (but `header`), a
/// bad value, a URL that is not http or https; and a list without any URL.
pub fn parse(bytes: &[u8], source: &str) -> Result<Vec<Entry>> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let n = 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count();
        err!(Usage, "{source}, line {n}: not UTF-8 text")
    })?;
    let mut entries: Vec<Entry> = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let n = i + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        // A UTF-8 byte-order mark (Windows editors write one) opens the first line only.
        let line = if n == 1 {
            line.strip_prefix('\u{feff}').unwrap_or(line)
        } else {
            line
        };
        let bad = |msg: String| err!(Usage, "{source}, line {n}: {msg}");
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            let Some(e) = entries.last_mut() else {
                return Err(bad(
                    "an option line (it starts with a space or a tab) before any URL line".into(),
                ));
            };
            option(e, line.trim()).map_err(bad)?;
        } else {
            let mut urls = Vec::new();
            for u in line.split('\t').map(str::trim).filter(|u| !u.is_empty()) {
                check_url(u).map_err(|m| bad(format!("{u:?}: {m}")))?;
                urls.push(u.to_owned());
            }
            entries.push(Entry {
                line: n,
                urls,
                out: None,
                dir: None,
                checksum: None,
                headers: Vec::new(),
                connections: None,
            });
        }
    }
    if entries.is_empty() {
        return Err(err!(Usage, "{source}: no URL in the list"));
    }
    Ok(entries)
}

/// A URL of the list, parsed as the command line's are (http or https; userinfo taken
/// out first, as [`http::split_userinfo`] does for the command line).
fn check_url(u: &str) -> std::result::Result<(), String> {
    let (bare, _) = http::split_userinfo(u);
    match http::Url::parse(&bare) {
        Ok(_) => Ok(()),
        Err(http::UrlError::InvalidChar) if u.contains(' ') => {
            Err("a space in a URL (mirrors of one file are separated by TAB)".into())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Applies option line `kv` (trimmed) to `e`; `Err` says what is wrong with it.
fn option(e: &mut Entry, kv: &str) -> std::result::Result<(), String> {
    let (key, value) = kv.split_once('=').ok_or_else(|| format!("{kv:?} is not key=value"))?;
    // (`out = x` means `out=x`: a name does not start with the space after the `=`.)
    let (key, value) = (key.trim(), value.trim());
    let twice = || format!("{key}= given twice for the file of line {}", e.line);
    match key {
        "out" => {
            if e.out.is_some() {
                return Err(twice());
            }
            e.out = Some(relative_name(value)?);
        }
        "dir" => {
            if e.dir.is_some() {
                return Err(twice());
            }
            if value.is_empty() {
                return Err("dir= is empty".into());
            }
            e.dir = Some(PathBuf::from(value));
        }
        "checksum" => {
            if e.checksum.is_some() {
                return Err(twice());
            }
            let c = Checksum::parse(value).map_err(|err| err.msg.replacen("--checksum", "checksum=", 1))?;
            e.checksum = Some(c);
        }
        "header" => {
            let (name, v) = value
                .split_once(':')
                .ok_or_else(|| format!("header={value:?} is not 'Name: value'"))?;
            let (name, v) = (name.trim(), v.trim());
            http::check_field(name, v).map_err(|err| format!("header {name:?}: {err}"))?;
            e.headers.push((name.to_owned(), v.to_owned()));
        }
        "connections" => {
            if e.connections.is_some() {
                return Err(twice());
            }
            match value.trim().parse::<usize>() {
                Ok(c) if (1..=MAX_CONNECTIONS).contains(&c) => e.connections = Some(c),
                _ => return Err(format!("connections={value:?}: a number from 1 to {MAX_CONNECTIONS}")),
            }
        }
        _ => {
            return Err(format!(
                "unknown option {key:?} (ringdl takes out, dir, checksum, header, connections)"
            ));
        }
    }
    Ok(())
}

/// `out=` value `v` as a relative path that stays inside its directory.
fn relative_name(v: &str) -> std::result::Result<PathBuf, String> {
    let p = Path::new(v);
    if v.is_empty() {
        return Err("out= is empty".into());
    }
    // (`-o -` is standard output, which holds one download, not a list's file among others.)
    if v == "-" {
        return Err("out=- would be standard output, which takes one download, not a list's file: name a file (out=./- for one named '-')".into());
    }
    if p.components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "out={v:?} must be a name relative to the directory, without '..'"
        ));
    }
    // (`Path::components` drops a trailing `.`: `sub/.` and `.` name directories.)
    if matches!(v.rsplit('/').next(), Some("" | ".")) {
        return Err(format!("out={v:?} names a directory, not a file"));
    }
    if v.contains('\0') {
        return Err(format!("out={v:?} holds a NUL byte"));
    }
    Ok(p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn one(text: &str) -> Entry {
        let mut v = parse(text.as_bytes(), "list").unwrap();
        assert_eq!(v.len(), 1, "{v:?}");
        v.pop().unwrap()
    }

    fn error(text: &str) -> String {
        parse(text.as_bytes(), "list").unwrap_err().msg
    }

    #[test]
    fn urls_mirrors_and_options() {
        let text = format!(
            "# a release\n\nhttps://a.example/x.iso\thttp://b.example/x.iso\n  out=img.iso\n\tdir=/srv/dl\n  \
             checksum=sha-256={H}\n  header=X-Token: abc\n  header=Accept: */*\n  connections=8\r\nhttp://c/y\n"
        );
        let v = parse(text.as_bytes(), "list").unwrap();
        assert_eq!(v.len(), 2);
        let e = &v[0];
        assert_eq!(e.line, 3);
        assert_eq!(e.urls, ["https://a.example/x.iso", "http://b.example/x.iso"]);
        assert_eq!(e.out.as_deref(), Some(Path::new("img.iso")));
        assert_eq!(e.dir.as_deref(), Some(Path::new("/srv/dl")));
        assert_eq!(e.checksum.as_ref().unwrap().expected, vec![0xaa; 32]);
        assert_eq!(
            e.headers,
            [
                ("X-Token".to_owned(), "abc".to_owned()),
                ("Accept".to_owned(), "*/*".to_owned())
            ]
        );
        assert_eq!(e.connections, Some(8));
        assert_eq!(v[1].line, 10);
        assert_eq!(v[1].urls, ["http://c/y"]);
        assert_eq!(v[1].out, None);
    }

    #[test]
    fn spaces_around_key_and_value_are_left_out() {
        let e = one("http://h/f\n  out = t2.bin\n  dir =  d \n");
        assert_eq!(e.out.as_deref(), Some(Path::new("t2.bin")));
        assert_eq!(e.dir.as_deref(), Some(Path::new("d")));
    }

    #[test]
    fn a_byte_order_mark_and_crlf_are_taken() {
        let e = one("\u{feff}http://h/f\r\n out=g\r\n");
        assert_eq!(e.urls, ["http://h/f"]);
        assert_eq!(e.out.as_deref(), Some(Path::new("g")));
    }

    #[test]
    fn malformed_lines_are_named_by_number() {
        assert!(error(" out=x\nhttp://h/f\n").contains("list, line 1: an option line"));
        assert!(error("http://h/f\n\n  out\n").contains("line 3: \"out\" is not key=value"));
        assert!(error("http://h/f\n  split=4\n").contains("line 2: unknown option \"split\""));
        assert!(error("http://h/f\n  out=a\n  out=b\n").contains("line 3: out= given twice"));
        assert!(error("ftp://h/f\n").contains("line 1: \"ftp://h/f\""));
        assert!(error("http://h/f\n  checksum=md5=00\n").contains("line 2: checksum=: unknown algorithm"));
        assert!(error("http://h/f\n  checksum=sha-256=abc\n").contains("line 2: checksum=: a sha-256 digest is 64"));
        assert!(error("http://h/f\n  connections=0\n").contains("line 2: connections=\"0\""));
        assert!(error("http://h/f\n  connections=65\n").contains("a number from 1 to 64"));
        assert!(error("http://h/f\n  header=Host: x\n").contains("line 2: header \"Host\""));
        assert!(error("http://h/f\n  header=X-A: a\u{1}b\n").contains("line 2: header \"X-A\""));
        assert!(error("http://h/f\n  header=novalue\n").contains("is not 'Name: value'"));
        assert!(error("# nothing\n\n").contains("list: no URL in the list"));
    }

    #[test]
    fn out_stays_inside_its_directory() {
        assert_eq!(one("http://h/f\n out=sub/g\n").out.as_deref(), Some(Path::new("sub/g")));
        assert_eq!(one("http://h/f\n out=./-\n").out.as_deref(), Some(Path::new("./-")));
        assert!(error("http://h/f\n out=-\n").contains("line 2: out=- would be standard output"));
        for bad in ["/etc/passwd", "../x", "a/../../x", "", "d/", ".", "sub/.", "./", "-"] {
            let m = error(&format!("http://h/f\n out={bad}\n"));
            assert!(m.contains("line 2: out="), "{bad}: {m}");
        }
    }

    #[test]
    fn userinfo_spaces_and_bytes_that_are_not_text() {
        assert_eq!(one("https://u:p@h/f\n").urls, ["https://u:p@h/f"]);
        assert!(error("http://h/f http://g/f\n").contains("line 1: \"http://h/f http://g/f\": a space in a URL"));
        let mut bytes = b"http://h/f\n out=a\n out=\xff\n".to_vec();
        assert!(parse(&bytes, "l").unwrap_err().msg.contains("l, line 3: not UTF-8"));
        bytes.truncate(11);
        assert_eq!(parse(&bytes, "l").unwrap().len(), 1);
        // Only tabs and spaces: blank.
        assert_eq!(parse(b"\t \nhttp://h/f", "l").unwrap()[0].line, 2);
    }

    #[test]
    fn the_fuzz_corpus_keeps_its_properties() {
        crate::replay_corpus("input_list", crate::fuzz_props::input_list);
    }

    #[test]
    fn comments_and_indented_comments_are_skipped() {
        let e = one("#c\nhttp://h/f\n  # a note about it\n  out=g\n");
        assert_eq!(e.out.as_deref(), Some(Path::new("g")));
    }
}
