//! A mirror of a transfer: one URL of the file, its origin, its standing (pending until
//! its first answer agrees with the reference's, RFC 9110 §8.8 validators) and what it
//! served. What the loop does when a mirror is accepted or dropped is in src/event/mirrors.rs.

use http::Url;

/// Said after dropping a mirror whose validator differs (no `--checksum` was given).
pub(crate) const CHECKSUM_HINT: &str =
    " (with --checksum, mirrors whose validators differ are used: the digest proves the bytes)";

/// Said after dropping a mirror of another size (its size differs, or its 416 to a range
/// of the reference's) whose URL ends in another name than the reference's: they look
/// like different files given as mirrors of one.
pub(crate) const DIFFERENT_FILES_HINT: &str = ": its URL ends in another name than the reference's, so these look like \
     different files, not mirrors of one (ringdl -Z URL... fetches each URL as its own file)";

/// Whether URLs `a` and `b` end in different names (last path segments, as the output
/// would be named); `false` when either does not parse or ends in `/`.
pub(crate) fn names_differ(a: &str, b: &str) -> bool {
    match (Url::parse(a), Url::parse(b)) {
        (Ok(a), Ok(b)) => a.file_name().zip(b.file_name()).is_some_and(|(x, y)| x != y),
        _ => false,
    }
}

/// Where a mirror stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Its first answer has not come yet.
    Pending,
    /// It agrees with the reference (or is the reference): it serves segments.
    Accepted,
    /// Left out for the rest of the download.
    Dropped,
}

/// The most byte ranges a request asks for (a partial fetch's multi-range requests).
pub(crate) const MAX_RANGES_PER_REQUEST: usize = 64;

/// A mirror's standing and what it served.
#[derive(Clone, Debug)]
pub(crate) struct Mirror {
    /// The URL requests go to.
    pub(crate) target: std::rc::Rc<Url>,
    /// Extra request fields for it: `-H`, and credentials on its origin.
    pub(crate) headers: Vec<(String, String)>,
    /// Index of its origin among the run's origins (those of every mirror of the transfer).
    pub(crate) origin: usize,
    /// The URL as the summary and notes print it.
    pub(crate) url: String,
    pub(crate) standing: Standing,
    /// The validators of its first answer.
    pub(crate) validators: Validators,
    /// Its first answer's validator as the download compares it (see
    /// [`http::Response::validator`]): later answers must carry the same.
    pub(crate) validator: Option<Vec<u8>>,
    /// Body bytes it delivered.
    pub(crate) bytes: u64,
    /// Counted tries in a row that failed on it (any segment): a mirror that fails
    /// `--max-tries` times in a row is dropped even while each segment's own tries last
    /// (the segments succeed on the other mirrors).
    pub(crate) failures: u32,
    /// Rounds of connects to it that failed in a row (refused, timed out, unreachable),
    /// each counted once however many connections saw it: after `--max-tries` of them it
    /// cannot be reached. A connect that goes through starts the count again.
    pub(crate) connects_failed: u32,
    /// The most connections its server was seen serving when it turned one away, over
    /// this transfer's refusals (one refusal can come while another request is still
    /// unanswered and count one short); kept with the origin as what it allows.
    pub(crate) allows_seen: Option<usize>,
    /// Why it was dropped.
    pub(crate) dropped: Option<String>,
    /// The most byte ranges one request to it may ask for (a partial fetch's multi-range
    /// requests, `control::multi`): 64 until its server answers one with fewer parts than
    /// asked (halved) or refuses it with a 200 or 416 (1). It never grows again: the
    /// steps down of a transfer are bounded.
    pub(crate) ranges_per_request: usize,
}

impl Mirror {
    /// Mirror `url` with request fields `headers`, fetched from origin `origin`.
    pub(crate) fn new(url: Url, headers: Vec<(String, String)>, origin: usize) -> Mirror {
        Mirror {
            url: url.to_string(),
            target: std::rc::Rc::new(url),
            headers,
            origin,
            standing: Standing::Pending,
            validators: Validators::default(),
            validator: None,
            bytes: 0,
            failures: 0,
            connects_failed: 0,
            allows_seen: None,
            ranges_per_request: MAX_RANGES_PER_REQUEST,
            dropped: None,
        }
    }
}

/// The validators of an answer that mirrors are compared by (RFC 9110 §8.8): a strong
/// `ETag` and `Last-Modified`, as sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Validators {
    pub(crate) etag: Option<Vec<u8>>,
    pub(crate) last_modified: Option<Vec<u8>>,
}

impl Validators {
    /// The strong `ETag` (a weak one proves nothing about the bytes, RFC 9110 §8.8.1) and
    /// the `Last-Modified` of `resp`.
    pub(crate) fn of(resp: &http::Response<'_, '_>) -> Validators {
        let etag = match resp.validator() {
            Some(http::Validator::ETag { value, weak: false }) => Some(value.to_vec()),
            _ => None,
        };
        let last_modified = resp
            .header("last-modified")
            .filter(|v| !v.is_empty())
            .map(<[u8]>::to_vec);
        Validators { etag, last_modified }
    }

    /// Whether a mirror with these validators serves the same file as `reference`: both
    /// strong ETags equal, else (one has none) both Last-Modified equal. `Err` says why not.
    pub(crate) fn agree_with(&self, reference: &Validators) -> std::result::Result<(), String> {
        let show = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        if let (Some(a), Some(b)) = (&self.etag, &reference.etag) {
            return if a == b {
                Ok(())
            } else {
                Err(format!("ETag {} differs from the reference's {}", show(a), show(b)))
            };
        }
        match (&self.last_modified, &reference.last_modified) {
            (Some(a), Some(b)) if a == b => Ok(()),
            (Some(a), Some(b)) => Err(format!(
                "Last-Modified {} differs from the reference's {}",
                show(a),
                show(b)
            )),
            _ => Err("no validator (strong ETag or Last-Modified) to compare with the reference's".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(etag: Option<&str>, lm: Option<&str>) -> Validators {
        Validators {
            etag: etag.map(|s| s.as_bytes().to_vec()),
            last_modified: lm.map(|s| s.as_bytes().to_vec()),
        }
    }

    #[test]
    fn strong_etags_decide_when_both_have_one() {
        let r = v(Some("\"a\""), Some("Mon"));
        assert!(v(Some("\"a\""), Some("Tue")).agree_with(&r).is_ok());
        let e = v(Some("\"b\""), Some("Mon")).agree_with(&r).unwrap_err();
        assert!(e.contains("ETag \"b\" differs"), "{e}");
    }

    #[test]
    fn last_modified_decides_without_two_etags() {
        let r = v(Some("\"a\""), Some("Mon"));
        assert!(v(None, Some("Mon")).agree_with(&r).is_ok());
        assert!(
            v(None, Some("Tue"))
                .agree_with(&r)
                .unwrap_err()
                .contains("Last-Modified")
        );
        assert!(v(None, None).agree_with(&r).unwrap_err().contains("no validator"));
        assert!(v(Some("\"a\""), None).agree_with(&v(None, None)).is_err());
    }
}
