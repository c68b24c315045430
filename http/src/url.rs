//! URLs: the subset of RFC 3986 that names an `http` or `https` resource.

use core::fmt;

/// Longest URL accepted by [`Url::parse`] and [`Url::join`], in bytes.
///
/// Far above what servers accept on a request line (commonly 8 KiB), so it only
/// bounds work and memory.
pub const MAX_URL_LEN: usize = 64 * 1024;

/// The URI scheme of a [`Url`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `http`: plain TCP, default port 80 (RFC 9110 §4.2.1).
    Http,
    /// `https`: TLS, default port 443 (RFC 9110 §4.2.2).
    Https,
}

impl Scheme {
    /// The port used when the URL names none: 80 for `http`, 443 for `https`.
    pub const fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    /// The scheme in lowercase: `"http"` or `"https"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The scheme of a rejected URL, kept inline so that [`UrlError`] stays `Copy`.
///
/// Holds at most [`SchemeName::CAPACITY`] bytes, lowercased; longer schemes are cut
/// and displayed with a trailing `...`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SchemeName {
    // INVARIANT: bytes[..len] are ASCII scheme characters (ALPHA / DIGIT / "+" / "-" / ".").
    bytes: [u8; SchemeName::CAPACITY],
    len: u8,
    truncated: bool,
}

impl SchemeName {
    /// How many bytes of a scheme are kept.
    pub const CAPACITY: usize = 16;

    fn new(scheme: &[u8]) -> SchemeName {
        let mut bytes = [0u8; Self::CAPACITY];
        let len = scheme.len().min(Self::CAPACITY);
        for (dst, src) in bytes.iter_mut().zip(&scheme[..len]) {
            *dst = src.to_ascii_lowercase();
        }
        SchemeName {
            bytes,
            len: len as u8,
            truncated: scheme.len() > Self::CAPACITY,
        }
    }

    /// The scheme (possibly cut to [`SchemeName::CAPACITY`] bytes), lowercased.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }

    /// Whether the scheme was longer than [`SchemeName::CAPACITY`] and was cut.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }
}

impl fmt::Debug for SchemeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SchemeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())?;
        if self.truncated {
            f.write_str("...")?;
        }
        Ok(())
    }
}

/// Why a URL or a `Location` reference was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UrlError {
    /// Longer than [`MAX_URL_LEN`] bytes.
    TooLong,
    /// A space or control character in [`Url::parse`] input, or CR, LF, HTAB or NUL
    /// in a [`Url::join`] reference.
    InvalidChar,
    /// No `scheme://` at the start.
    MissingScheme,
    /// A scheme other than `http` or `https`; carries the scheme.
    UnsupportedScheme(SchemeName),
    /// `http:` or `https:` not followed by `//` and an authority.
    MissingAuthority,
    /// `user:password@` before the host: credentials are not taken from URLs.
    Userinfo,
    /// No host between `//` and the port, path or query.
    EmptyHost,
    /// A host name character outside `A-Z a-z 0-9 - . _ ~`, an empty label, or a
    /// name longer than 253 bytes.
    InvalidHost,
    /// A numeric host that is not a strict dotted-quad IPv4 address.
    InvalidIpv4,
    /// A bracketed host that is not an IPv6 address (RFC 3986 §3.2.2; zone IDs and
    /// IPvFuture are not supported).
    InvalidIpv6,
    /// A port that is not all digits, is 0, or exceeds 65535.
    InvalidPort,
}

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlError::TooLong => f.write_str("url too long"),
            UrlError::InvalidChar => f.write_str("space or control character in url"),
            UrlError::MissingScheme => f.write_str("missing scheme: url must start with http:// or https://"),
            UrlError::UnsupportedScheme(name) => {
                write!(f, "unsupported scheme \"{name}\": only http and https are supported")
            }
            UrlError::MissingAuthority => f.write_str("missing \"//\" and host after scheme"),
            UrlError::Userinfo => f.write_str("credentials in url (user@host) are not supported"),
            UrlError::EmptyHost => f.write_str("empty host in url"),
            UrlError::InvalidHost => f.write_str("invalid host name in url"),
            UrlError::InvalidIpv4 => f.write_str("invalid ipv4 address in url"),
            UrlError::InvalidIpv6 => f.write_str("invalid ipv6 address in url"),
            UrlError::InvalidPort => f.write_str("invalid port in url"),
        }
    }
}

impl std::error::Error for UrlError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum HostKind {
    Name,
    Ipv4,
    Ipv6,
}

/// An absolute `http` or `https` URL, owned and normalized.
///
/// Built by [`Url::parse`] or [`Url::join`].
///
/// Accepted shape (RFC 3986 §3, RFC 9110 §4.2):
/// `scheme "://" host [ ":" port ] path-abempty [ "?" query ] [ "#" fragment ]`.
///
/// * The scheme is `http` or `https`, compared case-insensitively.
/// * Userinfo (`user:pass@`) is rejected: credentials are never sent from a URL.
/// * The host is a DNS name (`A-Z a-z 0-9 - . _ ~`, stored lowercased), a dotted-quad
///   IPv4 literal, or a bracketed IPv6 literal (stored without brackets, lowercased).
///   Percent-encoded and internationalized hosts are rejected (no IDNA here). A name
///   whose last label is all digits must be a strict dotted quad (no leading zeros,
///   each part ≤ 255): resolvers read `0x7f.1` or `010.0.0.1` in surprising ways.
/// * The port is 1..=65535; an empty port (`http://h:/`) means the default (§3.2.3).
/// * The path has its dot segments removed (§5.2.4), as §5.2.2 does for every
///   reference with a scheme. Otherwise path and query are kept byte for byte, except
///   that bytes a URI may not contain (non-ASCII, `` "<>\^`{|} ``, and in [`Url::join`]
///   space and C0 controls) are percent-encoded (`%XX`, uppercase hex).
/// * The fragment is dropped: it is never sent (RFC 9110 §7.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Url {
    scheme: Scheme,
    // INVARIANT: non-empty, lowercase; an IPv6 literal is stored without brackets.
    host: String,
    kind: HostKind,
    // INVARIANT: never 0 and never the scheme's default port.
    port: Option<u16>,
    // INVARIANT: starts with '/', holds only URI characters (printable ASCII, no
    // space, no '#').
    path_and_query: String,
    // INVARIANT: index of the '?' in path_and_query, or its length when no query.
    query_start: usize,
}

impl Url {
    /// Parses an absolute `http` or `https` URL (RFC 3986 §3, RFC 9110 §4.2).
    ///
    /// # Errors
    ///
    /// Any [`UrlError`]: a space or control character anywhere is
    /// [`UrlError::InvalidChar`]; another scheme is [`UrlError::UnsupportedScheme`]
    /// (or [`UrlError::MissingScheme`] when no `//` follows it, as in
    /// `localhost:8080`); userinfo is [`UrlError::Userinfo`].
    pub fn parse(s: &str) -> Result<Url, UrlError> {
        let s = s.as_bytes();
        if s.len() > MAX_URL_LEN {
            return Err(UrlError::TooLong);
        }
        if s.iter().any(|&b| b <= b' ' || b == 0x7f) {
            return Err(UrlError::InvalidChar);
        }
        let parts = Parts::split(s);
        match parts.scheme {
            Some(scheme) => Url::from_absolute(scheme, &parts),
            None => Err(UrlError::MissingScheme),
        }
    }

    /// Resolves `location` (a `Location` field value, RFC 9110 §10.2.2) against
    /// `self` as the base URI, per RFC 3986 §5.2.2, including §5.2.4
    /// remove_dot_segments.
    ///
    /// `location` may be absolute (`https://x/y`), network-path (`//x/y`),
    /// absolute-path (`/y`), relative (`y`, `../y`), query-only (`?q`) or empty.
    /// Leading and trailing spaces are ignored; other spaces, C0 controls and bytes
    /// a URI may not contain are percent-encoded, as browsers do. The fragment is
    /// dropped.
    ///
    /// # Errors
    ///
    /// [`UrlError::InvalidChar`] on CR, LF, HTAB or NUL anywhere (header
    /// injection); otherwise as [`Url::parse`] for the scheme and authority.
    pub fn join(&self, location: &[u8]) -> Result<Url, UrlError> {
        if location.len() > MAX_URL_LEN {
            return Err(UrlError::TooLong);
        }
        if location.iter().any(|&b| matches!(b, b'\r' | b'\n' | b'\t' | 0)) {
            return Err(UrlError::InvalidChar);
        }
        let location = trim_spaces(location);
        let parts = Parts::split(location);
        if let Some(scheme) = parts.scheme {
            return Url::from_absolute(scheme, &parts);
        }
        if let Some(authority) = parts.authority {
            let (host, kind, port) = parse_authority(authority, self.scheme)?;
            return Ok(Url::assemble(self.scheme, host, kind, port, parts.path, parts.query));
        }
        let host = self.host.clone();
        if parts.path.is_empty() {
            let query = parts.query.or_else(|| self.query().map(str::as_bytes));
            return Ok(Url::assemble(
                self.scheme,
                host,
                self.kind,
                self.port,
                self.path().as_bytes(),
                query,
            ));
        }
        if parts.path[0] == b'/' {
            return Ok(Url::assemble(
                self.scheme,
                host,
                self.kind,
                self.port,
                parts.path,
                parts.query,
            ));
        }
        // §5.2.3 merge: the base path always starts with '/', so it has a last '/'.
        let base = self.path();
        let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
        let mut merged = Vec::with_capacity(dir.len() + parts.path.len());
        merged.extend_from_slice(dir.as_bytes());
        merged.extend_from_slice(parts.path);
        Ok(Url::assemble(
            self.scheme,
            host,
            self.kind,
            self.port,
            &merged,
            parts.query,
        ))
    }

    fn from_absolute(scheme: &[u8], parts: &Parts<'_>) -> Result<Url, UrlError> {
        let scheme = if scheme.eq_ignore_ascii_case(b"http") {
            Scheme::Http
        } else if scheme.eq_ignore_ascii_case(b"https") {
            Scheme::Https
        } else if parts.authority.is_some() {
            return Err(UrlError::UnsupportedScheme(SchemeName::new(scheme)));
        } else {
            // "localhost:8080" or "mailto:x": no "//", so most likely no scheme at all.
            return Err(UrlError::MissingScheme);
        };
        let authority = parts.authority.ok_or(UrlError::MissingAuthority)?;
        let (host, kind, port) = parse_authority(authority, scheme)?;
        Ok(Url::assemble(scheme, host, kind, port, parts.path, parts.query))
    }

    fn assemble(
        scheme: Scheme,
        host: String,
        kind: HostKind,
        port: Option<u16>,
        path: &[u8],
        query: Option<&[u8]>,
    ) -> Url {
        let mut encoded = String::with_capacity(path.len() + 1);
        push_encoded(&mut encoded, path);
        let mut path_and_query = remove_dot_segments(&encoded);
        if !path_and_query.starts_with('/') {
            path_and_query.insert(0, '/');
        }
        let query_start = path_and_query.len();
        if let Some(query) = query {
            path_and_query.push('?');
            push_encoded(&mut path_and_query, query);
        }
        Url {
            scheme,
            host,
            kind,
            port,
            path_and_query,
            query_start,
        }
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host: a lowercased DNS name, a dotted-quad IPv4 address, or an IPv6
    /// address without brackets (`::1`).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether the host is an IPv4 or IPv6 literal rather than a name: such hosts get
    /// no TLS SNI (RFC 6066 §3) and need no DNS lookup.
    pub fn is_ip_literal(&self) -> bool {
        self.kind != HostKind::Name
    }

    /// Whether the host is an IPv6 literal (bracketed in the URL).
    pub fn is_ipv6(&self) -> bool {
        self.kind == HostKind::Ipv6
    }

    /// The TCP port: the explicit one, else the scheme's default (80 or 443).
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(self.scheme.default_port())
    }

    /// The request target in origin-form (RFC 9112 §3.2.1): path and query, `"/"`
    /// when the path is empty, never the fragment.
    pub fn path_and_query(&self) -> &str {
        &self.path_and_query
    }

    /// The path alone, starting with `'/'`.
    pub fn path(&self) -> &str {
        &self.path_and_query[..self.query_start]
    }

    /// The query without its `'?'`, when present (possibly empty).
    pub fn query(&self) -> Option<&str> {
        self.path_and_query.get(self.query_start + 1..)
    }

    /// Appends the `Host` field value (RFC 9110 §7.2): the host (IPv6 in brackets),
    /// then `:port` unless the port is the scheme's default.
    pub fn write_host_header(&self, out: &mut Vec<u8>) {
        if self.kind == HostKind::Ipv6 {
            out.push(b'[');
            out.extend_from_slice(self.host.as_bytes());
            out.push(b']');
        } else {
            out.extend_from_slice(self.host.as_bytes());
        }
        if let Some(port) = self.port {
            out.push(b':');
            push_decimal(out, u64::from(port));
        }
    }

    /// The `Host` field value as a `String`; see [`Url::write_host_header`].
    pub fn host_header(&self) -> String {
        let mut out = Vec::with_capacity(self.host.len() + 8);
        self.write_host_header(&mut out);
        // The host and digits are ASCII.
        String::from_utf8(out).unwrap_or_default()
    }

    /// The last path segment, still percent-encoded (`a%20b.zip` stays so); `None`
    /// when the path ends in `/`.
    ///
    /// See [`Url::file_name_decoded`] for a name fit to create a file with.
    pub fn file_name(&self) -> Option<&str> {
        let path = self.path();
        let name = &path[path.rfind('/').map_or(0, |i| i + 1)..];
        (!name.is_empty()).then_some(name)
    }

    /// [`Url::file_name`], percent-decoded (invalid UTF-8 replaced by U+FFFD) and
    /// passed through [`crate::sanitize_file_name`]; `None` when nothing usable is
    /// left.
    pub fn file_name_decoded(&self) -> Option<String> {
        let raw = self.file_name()?;
        let decoded = percent_decode(raw.as_bytes());
        crate::sanitize_file_name(&String::from_utf8_lossy(&decoded))
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme)?;
        if self.kind == HostKind::Ipv6 {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        f.write_str(&self.path_and_query)
    }
}

/// A user name and password from a URL's userinfo, percent-decoded: `(user, password)`.
pub type Userinfo = (Vec<u8>, Vec<u8>);

/// Takes the userinfo (`user:password@`, RFC 3986 §3.2.1) out of an absolute URL
/// given on a command line: returns the URL without it, and the user name and
/// password percent-decoded (bytes; the password is empty when there is no `:`).
///
/// The host is what follows the last `@` of the authority (as WHATWG URL parsers do),
/// so an unencoded `@` in a password still works. [`Url::parse`] rejects userinfo:
/// call this first, and keep the credentials out of the [`Url`], which is printed in
/// messages. Input without `scheme://` or without `@` in the authority comes back
/// unchanged with `None`.
pub fn split_userinfo(s: &str) -> (String, Option<Userinfo>) {
    let Some(start) = s.find("://").map(|i| i + 3) else {
        return (s.to_owned(), None);
    };
    let end = s[start..].find(['/', '?', '#']).map_or(s.len(), |i| start + i);
    let Some(at) = s[start..end].rfind('@').map(|i| start + i) else {
        return (s.to_owned(), None);
    };
    let info = &s[start..at];
    let (user, password) = info.split_once(':').unwrap_or((info, ""));
    let creds = (percent_decode(user.as_bytes()), percent_decode(password.as_bytes()));
    (format!("{}{}", &s[..start], &s[at + 1..]), Some(creds))
}

/// A URI reference split per RFC 3986 Appendix B, fragment dropped.
struct Parts<'a> {
    scheme: Option<&'a [u8]>,
    authority: Option<&'a [u8]>,
    path: &'a [u8],
    query: Option<&'a [u8]>,
}

impl<'a> Parts<'a> {
    fn split(s: &'a [u8]) -> Parts<'a> {
        let mut rest = match s.iter().position(|&b| b == b'#') {
            Some(i) => &s[..i],
            None => s,
        };
        let mut scheme = None;
        if let Some(i) = rest.iter().position(|&b| matches!(b, b':' | b'/' | b'?'))
            && rest[i] == b':'
            && is_scheme(&rest[..i])
        {
            scheme = Some(&rest[..i]);
            rest = &rest[i + 1..];
        }
        let mut authority = None;
        if let Some(after) = rest.strip_prefix(b"//") {
            let end = after
                .iter()
                .position(|&b| b == b'/' || b == b'?')
                .unwrap_or(after.len());
            authority = Some(&after[..end]);
            rest = &after[end..];
        }
        let (path, query) = match rest.iter().position(|&b| b == b'?') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        Parts {
            scheme,
            authority,
            path,
            query,
        }
    }
}

/// RFC 3986 §3.1: `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
fn is_scheme(s: &[u8]) -> bool {
    match s.split_first() {
        Some((first, rest)) => {
            first.is_ascii_alphabetic()
                && rest
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        }
        None => false,
    }
}

fn trim_spaces(mut s: &[u8]) -> &[u8] {
    while let [b' ', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' '] = s {
        s = rest;
    }
    s
}

/// RFC 3986 §3.2: `[ userinfo "@" ] host [ ":" port ]`, userinfo rejected.
fn parse_authority(authority: &[u8], scheme: Scheme) -> Result<(String, HostKind, Option<u16>), UrlError> {
    if authority.contains(&b'@') {
        return Err(UrlError::Userinfo);
    }
    let (host, kind, port) = if let Some(inner) = authority.strip_prefix(b"[") {
        let close = inner.iter().position(|&b| b == b']').ok_or(UrlError::InvalidIpv6)?;
        let (addr, after) = (&inner[..close], &inner[close + 1..]);
        if !is_ipv6(addr) {
            return Err(UrlError::InvalidIpv6);
        }
        let port = match after.split_first() {
            None => None,
            Some((b':', port)) => Some(port),
            Some(_) => return Err(UrlError::InvalidIpv6),
        };
        (addr, HostKind::Ipv6, port)
    } else {
        let (host, port) = match authority.iter().position(|&b| b == b':') {
            Some(i) => (&authority[..i], Some(&authority[i + 1..])),
            None => (authority, None),
        };
        if host.is_empty() {
            return Err(UrlError::EmptyHost);
        }
        (host, name_kind(host)?, port)
    };
    let port = match port {
        None | Some([]) => None,
        Some(digits) => Some(parse_port(digits)?),
    };
    let port = port.filter(|&p| p != scheme.default_port());
    let host = host.to_ascii_lowercase();
    // Every accepted host byte is ASCII.
    let host = String::from_utf8(host).map_err(|_| UrlError::InvalidHost)?;
    Ok((host, kind, port))
}

/// Classifies a non-bracketed host: a strict IPv4 literal or a DNS name.
fn name_kind(host: &[u8]) -> Result<HostKind, UrlError> {
    if host.len() > 254 || (host.len() == 254 && host[253] != b'.') {
        return Err(UrlError::InvalidHost);
    }
    if !host
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
    {
        return Err(UrlError::InvalidHost);
    }
    let without_root = host.strip_suffix(b".").unwrap_or(host);
    let last_label = without_root.rsplit(|&b| b == b'.').next().unwrap_or(b"");
    if !last_label.is_empty() && last_label.iter().all(u8::is_ascii_digit) {
        return if is_ipv4(host) {
            Ok(HostKind::Ipv4)
        } else {
            Err(UrlError::InvalidIpv4)
        };
    }
    if without_root.split(|&b| b == b'.').any(<[u8]>::is_empty) {
        return Err(UrlError::InvalidHost);
    }
    Ok(HostKind::Name)
}

/// `port = *DIGIT`, limited here to 1..=65535.
fn parse_port(digits: &[u8]) -> Result<u16, UrlError> {
    let mut value: u16 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return Err(UrlError::InvalidPort);
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u16::from(b - b'0')))
            .ok_or(UrlError::InvalidPort)?;
    }
    if value == 0 {
        return Err(UrlError::InvalidPort);
    }
    Ok(value)
}

/// RFC 3986 §3.2.2 `IPv4address`: four `dec-octet`s, no leading zeros.
fn is_ipv4(s: &[u8]) -> bool {
    let mut parts = 0;
    for part in s.split(|&b| b == b'.') {
        parts += 1;
        let ok = match part {
            [] => false,
            [b'0'] => true,
            [b'0', ..] => false,
            _ => {
                part.len() <= 3
                    && part.iter().all(u8::is_ascii_digit)
                    && part.iter().fold(0u32, |acc, &b| acc * 10 + u32::from(b - b'0')) <= 255
            }
        };
        if !ok || parts > 4 {
            return false;
        }
    }
    parts == 4
}

/// RFC 3986 §3.2.2 `IPv6address`: up to eight 16-bit hex groups, one `::`, an
/// optional trailing IPv4 address.
fn is_ipv6(s: &[u8]) -> bool {
    let mut groups = 0;
    let mut compressed = false;
    let mut i = 0;
    if s.starts_with(b"::") {
        compressed = true;
        i = 2;
        if s.len() == 2 {
            return true;
        }
    }
    loop {
        let start = i;
        while i < s.len() && s[i].is_ascii_hexdigit() {
            i += 1;
        }
        if i < s.len() && s[i] == b'.' {
            if groups > 6 || !is_ipv4(&s[start..]) {
                return false;
            }
            groups += 2;
            break;
        }
        if i == start || i - start > 4 {
            return false;
        }
        groups += 1;
        if i == s.len() {
            break;
        }
        if s[i] != b':' || groups >= 8 {
            return false;
        }
        i += 1;
        if i < s.len() && s[i] == b':' {
            if compressed {
                return false;
            }
            compressed = true;
            i += 1;
            if i == s.len() {
                break;
            }
        } else if i == s.len() {
            return false;
        }
    }
    if compressed { groups <= 7 } else { groups == 8 }
}

/// Whether `b` may appear as-is in a path or query. Besides RFC 3986's
/// unreserved, reserved and `%`, this keeps `[` and `]` (common in queries, and
/// servers take them).
fn is_uri_byte(b: u8) -> bool {
    b > b' ' && b < 0x7f && !matches!(b, b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}')
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Appends `bytes`, percent-encoding those a URI may not contain. Idempotent on its
/// own output.
fn push_encoded(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        if is_uri_byte(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX_UPPER[usize::from(b >> 4)]));
            out.push(char::from(HEX_UPPER[usize::from(b & 0xf)]));
        }
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes `%XX` triplets; a `%` not followed by two hex digits is kept as-is.
pub(crate) fn percent_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%'
            && i + 2 < s.len()
            && let (Some(h), Some(l)) = (hex_value(s[i + 1]), hex_value(s[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// RFC 3986 §5.2.4 remove_dot_segments.
fn remove_dot_segments(mut input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    while !input.is_empty() {
        if let Some(rest) = input.strip_prefix("../") {
            input = rest;
        } else if let Some(rest) = input.strip_prefix("./") {
            input = rest;
        } else if input.starts_with("/./") {
            input = &input[2..];
        } else if input == "/." {
            input = "/";
        } else if input.starts_with("/../") {
            input = &input[3..];
            pop_segment(&mut out);
        } else if input == "/.." {
            input = "/";
            pop_segment(&mut out);
        } else if input == "." || input == ".." {
            input = "";
        } else {
            let skip = usize::from(input.starts_with('/'));
            let end = input[skip..].find('/').map_or(input.len(), |i| i + skip);
            out.push_str(&input[..end]);
            input = &input[end..];
        }
    }
    out
}

fn pop_segment(out: &mut String) {
    let cut = out.rfind('/').unwrap_or(0);
    out.truncate(cut);
}

/// Appends `n` in decimal ASCII.
pub(crate) fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn join(base: &str, r: &str) -> String {
        url(base)
            .join(r.as_bytes())
            .unwrap_or_else(|e| panic!("{r}: {e}"))
            .to_string()
    }

    #[test]
    fn parses_basic_http_and_https() {
        let u = url("http://Example.COM/a/b.iso?x=1&Y=2#frag");
        assert_eq!(u.scheme(), Scheme::Http);
        assert_eq!(u.host(), "example.com");
        assert_eq!(u.port(), 80);
        assert_eq!(u.path_and_query(), "/a/b.iso?x=1&Y=2");
        assert_eq!(u.path(), "/a/b.iso");
        assert_eq!(u.query(), Some("x=1&Y=2"));
        assert!(!u.is_ip_literal());
        assert_eq!(u.to_string(), "http://example.com/a/b.iso?x=1&Y=2");

        let u = url("HTTPS://h:8443");
        assert_eq!(u.scheme(), Scheme::Https);
        assert_eq!(u.port(), 8443);
        assert_eq!(u.path_and_query(), "/");
        assert_eq!(u.query(), None);
        assert_eq!(u.to_string(), "https://h:8443/");
    }

    #[test]
    fn scheme_default_ports() {
        assert_eq!(Scheme::Http.default_port(), 80);
        assert_eq!(Scheme::Https.default_port(), 443);
        assert_eq!(Scheme::Https.to_string(), "https");
    }

    #[test]
    fn query_kept_byte_for_byte() {
        let u = url("http://h/p?a=%2F&b=c+d&&e=[1]&f=/?g");
        assert_eq!(u.path_and_query(), "/p?a=%2F&b=c+d&&e=[1]&f=/?g");
        let u = url("http://h?q");
        assert_eq!(u.path_and_query(), "/?q");
        let u = url("http://h/p?");
        assert_eq!(u.path_and_query(), "/p?");
        assert_eq!(u.query(), Some(""));
    }

    #[test]
    fn fragment_dropped() {
        assert_eq!(url("http://h/p#a?b").path_and_query(), "/p");
        assert_eq!(url("http://h#x").path_and_query(), "/");
    }

    #[test]
    fn ports() {
        assert_eq!(url("http://h:/").port(), 80);
        assert_eq!(url("http://h:80/").to_string(), "http://h/");
        assert_eq!(url("https://h:443/").host_header(), "h");
        assert_eq!(url("http://h:443/").host_header(), "h:443");
        assert_eq!(url("http://h:65535/").port(), 65535);
        assert_eq!(url("http://h:0080/").port(), 80);
        assert_eq!(url("http://h:1").port(), 1);
        for bad in [
            "http://h:65536/",
            "http://h:0/",
            "http://h:99999999999999999999/",
            "http://h:8a/",
            "http://h:-1/",
            "http://h:+80/",
            "http://h:80:80/",
        ] {
            assert_eq!(Url::parse(bad), Err(UrlError::InvalidPort), "{bad}");
        }
    }

    #[test]
    fn ipv4_literals() {
        let u = url("http://127.0.0.1:8080/x");
        assert!(u.is_ip_literal());
        assert!(!u.is_ipv6());
        assert_eq!(u.host(), "127.0.0.1");
        assert_eq!(u.host_header(), "127.0.0.1:8080");
        assert!(url("http://0.0.0.0/").is_ip_literal());
        assert!(url("http://255.255.255.255/").is_ip_literal());
        for bad in [
            "http://256.1.1.1/",
            "http://1.2.3/",
            "http://1.2.3.4.5/",
            "http://01.2.3.4/",
            "http://1.2.3.4./",
            "http://1..3.4/",
            "http://123/",
            "http://0x7f.1/",
            "http://a.b.1/",
            "http://1.2.3.1000/",
        ] {
            assert_eq!(Url::parse(bad), Err(UrlError::InvalidIpv4), "{bad}");
        }
        // A digit-leading name whose last label is not numeric is a name.
        assert!(!url("http://1.2.3.4a/").is_ip_literal());
        assert!(!url("http://7zip.org/").is_ip_literal());
    }

    #[test]
    fn ipv6_literals() {
        let u = url("http://[::1]:8080/x");
        assert!(u.is_ip_literal());
        assert!(u.is_ipv6());
        assert_eq!(u.host(), "::1");
        assert_eq!(u.host_header(), "[::1]:8080");
        assert_eq!(u.to_string(), "http://[::1]:8080/x");
        let u = url("https://[2001:DB8::A]/");
        assert_eq!(u.host(), "2001:db8::a");
        assert_eq!(u.host_header(), "[2001:db8::a]");
        for good in [
            "::",
            "1:2:3:4:5:6:7:8",
            "1::",
            "1::8",
            "::ffff:1.2.3.4",
            "1:2:3:4:5:6:1.2.3.4",
            "1:2:3:4:5::1.2.3.4",
            "fe80::1:2",
            "1:2:3:4:5:6:7::",
            "::2:3:4:5:6:7:8",
        ] {
            assert!(is_ipv6(good.as_bytes()), "{good}");
            assert!(url(&format!("http://[{good}]/")).is_ipv6());
        }
        for bad in [
            "",
            ":",
            ":1",
            "1:",
            ":::",
            "1:::2",
            "1::2::3",
            "1:2:3:4:5:6:7:8:9",
            "1:2:3:4:5:6:7",
            "1::2:3:4:5:6:7:8",
            "12345::",
            "g::",
            "1:2:3:4:5:6:7:1.2.3.4",
            "::1.2.3",
            "::256.1.1.1",
            "1.2.3.4",
            "fe80::1%25eth0",
            "v1.x",
        ] {
            assert!(!is_ipv6(bad.as_bytes()), "{bad}");
            assert_eq!(
                Url::parse(&format!("http://[{bad}]/")),
                Err(UrlError::InvalidIpv6),
                "{bad}"
            );
        }
        assert_eq!(Url::parse("http://[::1/"), Err(UrlError::InvalidIpv6));
        assert_eq!(Url::parse("http://[::1]x/"), Err(UrlError::InvalidIpv6));
        assert_eq!(Url::parse("http://[::1]:/").map(|u| u.port()), Ok(80));
        assert_eq!(Url::parse("http://[::1]:0/"), Err(UrlError::InvalidPort));
        assert_eq!(Url::parse("http://::1/"), Err(UrlError::EmptyHost));
    }

    #[test]
    fn host_names() {
        assert_eq!(url("http://a-b_c~d.Example.org./").host(), "a-b_c~d.example.org.");
        assert_eq!(url("http://localhost/").host(), "localhost");
        let long = format!("http://{}/", "a".repeat(253));
        assert!(Url::parse(&long).is_ok());
        let long_root = format!("http://{}./", "a".repeat(253));
        assert!(Url::parse(&long_root).is_ok());
        let too_long = format!("http://{}/", "a".repeat(254));
        assert_eq!(Url::parse(&too_long), Err(UrlError::InvalidHost));
        for bad in [
            "http://a..b/",
            "http://.a/",
            "http://a%2eb/",
            "http://a!b/",
            "http://a,b/",
            "http://\u{e9}.com/",
            "http://a]b/",
            "http://a[b/",
            "http://./",
        ] {
            assert_eq!(Url::parse(bad), Err(UrlError::InvalidHost), "{bad}");
        }
    }

    #[test]
    fn rejects() {
        assert_eq!(Url::parse("http:///p"), Err(UrlError::EmptyHost));
        assert_eq!(Url::parse("http://"), Err(UrlError::EmptyHost));
        assert_eq!(Url::parse("http://:80/"), Err(UrlError::EmptyHost));
        assert_eq!(Url::parse("http://u:p@h/"), Err(UrlError::Userinfo));
        assert_eq!(Url::parse("http://@h/"), Err(UrlError::Userinfo));
        assert_eq!(Url::parse("http:h/p"), Err(UrlError::MissingAuthority));
        assert_eq!(Url::parse("https:/h/p"), Err(UrlError::MissingAuthority));
        assert_eq!(Url::parse("example.com/x"), Err(UrlError::MissingScheme));
        assert_eq!(Url::parse("localhost:8080/x"), Err(UrlError::MissingScheme));
        assert_eq!(Url::parse("//h/x"), Err(UrlError::MissingScheme));
        assert_eq!(Url::parse(""), Err(UrlError::MissingScheme));
        assert_eq!(Url::parse("1http://h/"), Err(UrlError::MissingScheme));
        for bad in [
            "http://h/a b",
            " http://h/",
            "http://h/\t",
            "http://h/\r\n",
            "http://h/\0",
            "http://h/\x7f",
            "http://h/#a b",
        ] {
            assert_eq!(Url::parse(bad), Err(UrlError::InvalidChar), "{bad:?}");
        }
        let huge = format!("http://h/{}", "a".repeat(MAX_URL_LEN));
        assert_eq!(Url::parse(&huge), Err(UrlError::TooLong));
        assert_eq!(url("http://h/").join(huge.as_bytes()), Err(UrlError::TooLong));
    }

    #[test]
    fn unsupported_scheme_names_it() {
        let err = Url::parse("ftp://h/x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported scheme \"ftp\": only http and https are supported"
        );
        let UrlError::UnsupportedScheme(name) = err else {
            panic!()
        };
        assert_eq!(name.as_str(), "ftp");
        assert!(!name.is_truncated());
        assert_eq!(format!("{name:?}"), "\"ftp\"");
        let err = Url::parse("Very-Long.Scheme+Name-Here://h/").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported scheme \"very-long.scheme...\": only http and https are supported"
        );
        let err = Url::parse("file:///etc/passwd").unwrap_err();
        assert!(matches!(err, UrlError::UnsupportedScheme(n) if n.as_str() == "file"));
    }

    #[test]
    fn error_messages_are_lowercase_static() {
        let all = [
            UrlError::TooLong,
            UrlError::InvalidChar,
            UrlError::MissingScheme,
            UrlError::UnsupportedScheme(SchemeName::new(b"ftp")),
            UrlError::MissingAuthority,
            UrlError::Userinfo,
            UrlError::EmptyHost,
            UrlError::InvalidHost,
            UrlError::InvalidIpv4,
            UrlError::InvalidIpv6,
            UrlError::InvalidPort,
        ];
        for e in all {
            let msg = e.to_string();
            assert!(!msg.is_empty());
            assert!(!msg.ends_with('.'));
            assert!(msg.starts_with(|c: char| c.is_lowercase()), "{msg}");
        }
    }

    #[test]
    fn encodes_bytes_not_allowed_in_uris() {
        assert_eq!(
            url("http://h/\u{e9}t\u{e9}.zip?q=\u{e9}").path_and_query(),
            "/%C3%A9t%C3%A9.zip?q=%C3%A9"
        );
        assert_eq!(url("http://h/a\"<>\\^`{|}").path(), "/a%22%3C%3E%5C%5E%60%7B%7C%7D");
        // Idempotent on its own output, '%' kept.
        assert_eq!(url("http://h/a%20b%zz").path(), "/a%20b%zz");
    }

    #[test]
    fn dot_segments_removed_on_parse() {
        assert_eq!(url("http://h/a/b/../c/./d").path(), "/a/c/d");
        assert_eq!(url("http://h/../../x").path(), "/x");
        assert_eq!(url("http://h/a/..").path(), "/");
        assert_eq!(url("http://h/a/.").path(), "/a/");
        assert_eq!(url("http://h/a/%2E%2E/b").path(), "/a/%2E%2E/b");
    }

    #[test]
    fn remove_dot_segments_rfc_examples() {
        assert_eq!(remove_dot_segments("/a/b/c/./../../g"), "/a/g");
        assert_eq!(remove_dot_segments("mid/content=5/../6"), "mid/6");
        assert_eq!(remove_dot_segments(""), "");
        assert_eq!(remove_dot_segments("."), "");
        assert_eq!(remove_dot_segments(".."), "");
        assert_eq!(remove_dot_segments("../a"), "a");
        assert_eq!(remove_dot_segments("/.."), "/");
        assert_eq!(remove_dot_segments("/a/b/.."), "/a/");
        assert_eq!(remove_dot_segments("/a/..b/c"), "/a/..b/c");
    }

    /// RFC 3986 §5.4.1 normal examples, with an http base.
    #[test]
    fn join_rfc3986_normal_examples() {
        let base = "http://a/b/c/d;p?q";
        let cases = [
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g/"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q"),
            ("g#s", "http://a/b/c/g"),
            ("g?y#s", "http://a/b/c/g?y"),
            (";x", "http://a/b/c/;x"),
            ("g;x", "http://a/b/c/g;x"),
            ("g;x?y#s", "http://a/b/c/g;x?y"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("./", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../", "http://a/"),
            ("../../g", "http://a/g"),
        ];
        for (r, want) in cases {
            assert_eq!(join(base, r), want, "{r}");
        }
    }

    /// RFC 3986 §5.4.2 abnormal examples.
    #[test]
    fn join_rfc3986_abnormal_examples() {
        let base = "http://a/b/c/d;p?q";
        let cases = [
            ("../../../g", "http://a/g"),
            ("../../../../g", "http://a/g"),
            ("/./g", "http://a/g"),
            ("/../g", "http://a/g"),
            ("g.", "http://a/b/c/g."),
            (".g", "http://a/b/c/.g"),
            ("g..", "http://a/b/c/g.."),
            ("..g", "http://a/b/c/..g"),
            ("./../g", "http://a/b/g"),
            ("./g/.", "http://a/b/c/g/"),
            ("g/./h", "http://a/b/c/g/h"),
            ("g/../h", "http://a/b/c/h"),
            ("g;x=1/./y", "http://a/b/c/g;x=1/y"),
            ("g;x=1/../y", "http://a/b/c/y"),
            ("g?y/./x", "http://a/b/c/g?y/./x"),
            ("g?y/../x", "http://a/b/c/g?y/../x"),
            ("g#s/./x", "http://a/b/c/g"),
            ("g#s/../x", "http://a/b/c/g"),
        ];
        for (r, want) in cases {
            assert_eq!(join(base, r), want, "{r}");
        }
        // Strict parser (§5.2.2): "http:g" has a scheme and no authority.
        assert_eq!(url(base).join(b"http:g"), Err(UrlError::MissingAuthority));
    }

    #[test]
    fn join_absolute_and_network_path() {
        assert_eq!(join("http://a/b", "https://X.org:8443/y?z"), "https://x.org:8443/y?z");
        assert_eq!(join("https://a:444/b", "//c/d"), "https://c/d");
        assert_eq!(join("https://a:444/b", "//c:444"), "https://c:444/");
        assert_eq!(join("https://a:444/b", "/d"), "https://a:444/d");
        assert_eq!(join("http://[::1]:81/b/c", "d"), "http://[::1]:81/b/d");
        assert_eq!(join("http://a/b?q", "?"), "http://a/b?");
        assert_eq!(join("http://a", "x"), "http://a/x");
        let u = url("http://a/b").join(b"ftp://x/").unwrap_err();
        assert!(matches!(u, UrlError::UnsupportedScheme(_)));
        assert_eq!(url("http://a/b").join(b"//u@x/"), Err(UrlError::Userinfo));
        assert_eq!(url("http://a/b").join(b"///x"), Err(UrlError::EmptyHost));
    }

    #[test]
    fn join_encodes_and_rejects() {
        assert_eq!(join("http://a/b/c", "d e/f g?h i"), "http://a/b/d%20e/f%20g?h%20i");
        assert_eq!(join("http://a/b", "  /x  "), "http://a/x");
        assert_eq!(join("http://a/b", "/\x01\x7f\u{e9}"), "http://a/%01%7F%C3%A9");
        for bad in [&b"/x\r\nSet-Cookie: a"[..], b"/x\n", b"/\tx", b"/x\0", b"http://h/\r"] {
            assert_eq!(url("http://a/b").join(bad), Err(UrlError::InvalidChar), "{bad:?}");
        }
        // Non-UTF-8 bytes are encoded, not rejected.
        assert_eq!(url("http://a/b").join(b"/\xff\xfe").unwrap().path(), "/%FF%FE");
    }

    #[test]
    fn file_names() {
        assert_eq!(url("http://h/a/b.iso?x=/y").file_name(), Some("b.iso"));
        assert_eq!(url("http://h/a/").file_name(), None);
        assert_eq!(url("http://h").file_name(), None);
        assert_eq!(url("http://h/a%20b.zip").file_name(), Some("a%20b.zip"));
        assert_eq!(
            url("http://h/a%20b.zip").file_name_decoded().as_deref(),
            Some("a b.zip")
        );
        assert_eq!(
            url("http://h/x/..%2F..%2Fetc").file_name_decoded().as_deref(),
            Some("etc")
        );
        assert_eq!(url("http://h/%2E%2E").file_name_decoded(), None);
        assert_eq!(
            url("http://h/%FF.bin").file_name_decoded().as_deref(),
            Some("\u{fffd}.bin")
        );
    }

    #[test]
    fn split_userinfo_takes_credentials_out() {
        let (u, c) = split_userinfo("https://alice:p%40ss%3Aw0rd%25@host:8443/a@b?c@d");
        assert_eq!(u, "https://host:8443/a@b?c@d");
        assert_eq!(c, Some((b"alice".to_vec(), b"p@ss:w0rd%".to_vec())));
        assert!(Url::parse(&u).is_ok());
        // Unencoded '@' and ':' in the password: the host follows the last '@'.
        let (u, c) = split_userinfo("http://bob:a@b:c@h/");
        assert_eq!(u, "http://h/");
        assert_eq!(c, Some((b"bob".to_vec(), b"a@b:c".to_vec())));
        let (u, c) = split_userinfo("http://tok@h");
        assert_eq!((u.as_str(), c), ("http://h", Some((b"tok".to_vec(), Vec::new()))));
        for plain in ["http://h/x@y", "http://h?q=@", "h@x", "http://h#@"] {
            assert_eq!(split_userinfo(plain), (plain.to_owned(), None), "{plain}");
        }
    }

    #[test]
    fn percent_decode_edges() {
        assert_eq!(percent_decode(b"%41%4a%4A"), b"AJJ");
        assert_eq!(percent_decode(b"%"), b"%");
        assert_eq!(percent_decode(b"%4"), b"%4");
        assert_eq!(percent_decode(b"a%4g"), b"a%4g");
        assert_eq!(percent_decode(b"%%41"), b"%A");
        assert_eq!(percent_decode(b"x%41"), b"xA");
    }

    #[test]
    fn push_decimal_values() {
        for n in [0u64, 7, 10, 65535, u64::MAX] {
            let mut v = Vec::new();
            push_decimal(&mut v, n);
            assert_eq!(v, n.to_string().as_bytes());
        }
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "http://h/",
            "https://h:8443/a?b",
            "http://[::1]/x",
            "http://1.2.3.4:81/%20",
        ] {
            let u = url(s);
            assert_eq!(u.to_string(), s);
            assert_eq!(url(&u.to_string()), u);
        }
    }

    /// Property: whatever `join` accepts is a well-formed URL that parses back to
    /// itself; nothing panics.
    #[test]
    fn property_join_random_references() {
        let mut rng = crate::test_rng::Rng(0x1234_5678_9abc_def1);
        let base = url("https://a.example:8443/d1/d2/f?q=1");
        let alphabet = b"/.?#:@[]%20azAZ09-_~!$&'()*+,;= \\";
        for _ in 0..20_000 {
            let len = rng.below(24);
            let mut r = rng.bytes(len, alphabet);
            if rng.below(4) == 0 {
                let mut abs = b"http://".to_vec();
                abs.append(&mut r);
                r = abs;
            }
            let Ok(u) = base.join(&r) else { continue };
            let pq = u.path_and_query();
            assert!(pq.starts_with('/'), "{pq}");
            assert!(pq.bytes().all(is_uri_byte), "{pq:?}");
            assert!(!pq.contains('#'));
            assert!(!u.path().split('/').any(|seg| seg == "." || seg == ".."), "{pq}");
            assert!(!u.host().is_empty());
            assert_eq!(Url::parse(&u.to_string()).as_ref(), Ok(&u), "{u}");
        }
    }

    /// Cases mutation testing found unpinned.
    #[test]
    fn url_length_limit_is_exact() {
        let base = "http://h/";
        let at_limit = format!("{base}{}", "a".repeat(MAX_URL_LEN - base.len()));
        assert!(Url::parse(&at_limit).is_ok(), "a URL of MAX_URL_LEN bytes");
        assert_eq!(Url::parse(&format!("{at_limit}a")), Err(UrlError::TooLong));
        let u = Url::parse(base).unwrap();
        let loc = format!("/{}", "b".repeat(MAX_URL_LEN - 1));
        assert!(u.join(loc.as_bytes()).is_ok(), "a Location of MAX_URL_LEN bytes");
        assert_eq!(u.join(format!("{loc}b").as_bytes()), Err(UrlError::TooLong));
        // And the limit is the documented 64 KiB, not merely consistent with itself.
        assert!(Url::parse(&format!("{base}{}", "a".repeat(60 * 1024))).is_ok());
    }

    #[test]
    fn ipv6_groups_are_separated_by_colons_only() {
        assert!(Url::parse("http://[1:2:3:4:5:6:7:8]/").is_ok());
        assert!(Url::parse("http://[1:2:3:4:5:6:7x8]/").is_err());
        assert!(Url::parse("http://[1:2:3:4:5:6:7:8:9]/").is_err());
    }

    #[test]
    fn a_long_scheme_is_marked_truncated() {
        let Err(UrlError::UnsupportedScheme(name)) = Url::parse("Very-Long.Scheme+Name-Here://h/") else {
            panic!("expected UnsupportedScheme")
        };
        assert!(name.is_truncated());
        assert_eq!(name.as_str().len(), SchemeName::CAPACITY);
    }
}
