//! Which engine moves the body, decided in one pure place from what `--engine` asked
//! (`None` = auto) and the facts gathered by the caller: the URL's scheme, whether the
//! kernel has TLS (`ktls::probe`, one throwaway socket) and what the output is (not a
//! regular file, or a regular file that did or did not accept
//! O_DIRECT). Nothing here opens, probes or prints.
//!
//! The rules, in the order they apply:
//! 1. `ktls-direct` is for https; a forced kTLS engine (`ktls-direct`, or `splice` over
//!    https) needs kernel TLS.
//! 2. An output that is not a regular file (standard output, FIFO, terminal, socket,
//!    device) gets `buffered`; a forced engine that needs a regular file is refused.
//! 3. A regular file gets the forced engine, `direct` only if O_DIRECT was accepted; auto
//!    takes `direct` where O_DIRECT works, else `buffered`.
//! 4. Over https with kernel TLS, auto and the kTLS engines hand TLS to the kernel after
//!    the handshake, and auto's `direct` becomes `ktls-direct`.

use super::EngineKind;
use crate::err;
use crate::error::Result;

/// What the output is, as the engine choice sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sink<'a> {
    /// Not a regular file: standard output, a FIFO, a terminal, a socket, a device (named
    /// for messages). Written through `buffered`, in order unless it is a sink.
    NotAFile(&'a str),
    /// A regular file; `direct` = it was opened with O_DIRECT (statx STATX_DIOALIGN,
    /// Linux 6.1+, gave its alignment). `path` names it in messages.
    File {
        /// O_DIRECT accepted.
        direct: bool,
        /// The `.part` file, for messages.
        path: &'a std::path::Path,
    },
}

/// The decision: the engine, whether connections hand TLS to the kernel, and a note for
/// the summary (why kTLS is not used, or empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// The engine that runs.
    pub engine: EngineKind,
    /// Hand each connection's TLS to the kernel after the handshake (kTLS, Linux 4.13+ RX).
    pub ktls: bool,
    /// Appended to the engine's name in the summary.
    pub note: &'static str,
}

/// Whether the choice depends on kernel TLS, i.e. whether the caller must probe it: https,
/// and auto or a kTLS engine.
pub fn needs_ktls_probe(forced: Option<EngineKind>, https: bool) -> bool {
    https && matches!(forced, None | Some(EngineKind::KtlsDirect | EngineKind::Splice))
}

/// Whether the output file is first opened with O_DIRECT: every choice but `buffered` and
/// `splice` (SPLICE writes through the page cache).
pub fn opens_direct(forced: Option<EngineKind>) -> bool {
    !matches!(forced, Some(EngineKind::Buffered | EngineKind::Splice))
}

/// The refusals that need no output: checked before the `.part` is locked or opened, so a
/// forced engine that cannot run here touches nothing. `ktls` is the probe's answer (None
/// when not probed: see [`needs_ktls_probe`]); `not_a_file` names an output that is not a
/// regular file.
///
/// # Errors
/// [`crate::error::Kind::Usage`] for `ktls-direct` on plain http;
/// [`crate::error::Kind::LocalIo`] for a kTLS engine without kernel TLS, and for `direct`,
/// `splice` or `ktls-direct` to an output that is not a regular file.
pub fn refusal(forced: Option<EngineKind>, https: bool, ktls: Option<bool>, not_a_file: Option<&str>) -> Result<()> {
    let Some(kind) = forced else { return Ok(()) };
    if kind == EngineKind::KtlsDirect && !https {
        return Err(err!(
            Usage,
            "--engine ktls-direct is for https URLs (plain HTTP: --engine direct)"
        ));
    }
    if needs_ktls_probe(forced, https) && ktls == Some(false) {
        return Err(err!(
            LocalIo,
            "--engine {} over https needs kernel TLS, and this kernel has none (TCP_ULP \"tls\": ENOENT; try modprobe tls)",
            kind.name()
        ));
    }
    if let Some(what) = not_a_file
        && kind != EngineKind::Buffered
    {
        return Err(err!(
            LocalIo,
            "--engine {} needs a regular file, not {what} (use --engine auto or buffered)",
            kind.name()
        ));
    }
    Ok(())
}

/// Picks the engine (rules in the module docs).
///
/// # Errors
/// Those of [`refusal`], and [`crate::error::Kind::LocalIo`] for `--engine direct` on a
/// file that refused O_DIRECT.
pub fn select(forced: Option<EngineKind>, https: bool, ktls: Option<bool>, sink: &Sink<'_>) -> Result<Selection> {
    let not_a_file = match sink {
        Sink::NotAFile(what) => Some(*what),
        Sink::File { .. } => None,
    };
    refusal(forced, https, ktls, not_a_file)?;
    let engine = match (sink, forced) {
        (Sink::NotAFile(_), _) => EngineKind::Buffered,
        (Sink::File { direct: false, path }, Some(EngineKind::Direct | EngineKind::KtlsDirect)) => {
            return Err(err!(
                LocalIo,
                "--engine {}: the filesystem of {} refuses O_DIRECT",
                forced.map_or("auto", EngineKind::name),
                path.display()
            ));
        }
        (Sink::File { .. }, Some(kind)) => kind,
        (Sink::File { direct: true, .. }, None) => EngineKind::Direct,
        (Sink::File { direct: false, .. }, None) => EngineKind::Buffered,
    };
    if !needs_ktls_probe(forced, https) {
        return Ok(Selection {
            engine,
            ktls: false,
            note: "",
        });
    }
    if ktls != Some(true) {
        // Only auto gets here (a forced kTLS engine was refused above).
        return Ok(Selection {
            engine,
            ktls: false,
            note: " (no kTLS on this kernel: user-space TLS)",
        });
    }
    let engine = if engine == EngineKind::Direct {
        EngineKind::KtlsDirect
    } else {
        engine
    };
    Ok(Selection {
        engine,
        ktls: true,
        note: "",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use EngineKind::*;
    use std::path::Path;

    const ALL: [Option<EngineKind>; 5] = [None, Some(Direct), Some(Buffered), Some(Splice), Some(KtlsDirect)];

    fn file(direct: bool) -> Sink<'static> {
        Sink::File {
            direct,
            path: Path::new("f.part"),
        }
    }

    fn pick(
        forced: Option<EngineKind>,
        https: bool,
        ktls: Option<bool>,
        sink: &Sink<'_>,
    ) -> Option<(EngineKind, bool)> {
        select(forced, https, ktls, sink).ok().map(|s| (s.engine, s.ktls))
    }

    #[test]
    fn auto_takes_direct_where_o_direct_works_and_ktls_where_the_kernel_has_it() {
        assert_eq!(pick(None, false, None, &file(true)), Some((Direct, false)));
        assert_eq!(pick(None, false, None, &file(false)), Some((Buffered, false)));
        assert_eq!(pick(None, true, Some(false), &file(true)), Some((Direct, false)));
        assert_eq!(pick(None, true, Some(true), &file(true)), Some((KtlsDirect, true)));
        // Buffered output still lets the kernel decrypt.
        assert_eq!(pick(None, true, Some(true), &file(false)), Some((Buffered, true)));
        assert_eq!(
            pick(None, true, Some(true), &Sink::NotAFile("a FIFO")),
            Some((Buffered, true))
        );
        let s = select(None, true, Some(false), &file(true)).unwrap();
        assert!(s.note.contains("no kTLS"), "{s:?}");
        assert_eq!(select(None, true, Some(true), &file(true)).unwrap().note, "");
    }

    #[test]
    fn forced_engines_run_or_are_refused_with_the_reason() {
        assert_eq!(pick(Some(Buffered), true, None, &file(true)), Some((Buffered, false)));
        assert_eq!(pick(Some(Direct), true, None, &file(true)), Some((Direct, false)));
        assert_eq!(pick(Some(Splice), false, None, &file(false)), Some((Splice, false)));
        assert_eq!(pick(Some(Splice), true, Some(true), &file(false)), Some((Splice, true)));
        assert_eq!(
            pick(Some(KtlsDirect), true, Some(true), &file(true)),
            Some((KtlsDirect, true))
        );
        let msg = |f, https, k, s: &Sink<'_>| select(f, https, k, s).unwrap_err().to_string();
        assert!(msg(Some(Direct), false, None, &file(false)).contains("refuses O_DIRECT"));
        assert!(msg(Some(KtlsDirect), true, Some(true), &file(false)).contains("refuses O_DIRECT"));
        assert!(msg(Some(KtlsDirect), false, None, &file(true)).contains("is for https"));
        assert!(msg(Some(KtlsDirect), true, Some(false), &file(true)).contains("needs kernel TLS"));
        assert!(msg(Some(Splice), true, Some(false), &file(true)).contains("needs kernel TLS"));
        for f in [Some(Direct), Some(Splice)] {
            assert!(msg(f, false, None, &Sink::NotAFile("a FIFO")).contains("not a FIFO"));
        }
        assert_eq!(
            pick(Some(Buffered), false, None, &Sink::NotAFile("a FIFO")),
            Some((Buffered, false))
        );
    }

    #[test]
    fn the_early_refusals_are_the_same_as_the_late_ones() {
        // Whatever refusal() lets pass before the output exists, select() must not refuse
        // for a kTLS or output reason afterwards, and the other way round.
        for forced in ALL {
            for https in [false, true] {
                for ktls in [None, Some(false), Some(true)] {
                    let ktls = if needs_ktls_probe(forced, https) {
                        ktls.or(Some(false))
                    } else {
                        None
                    };
                    for sink in [Sink::NotAFile("a FIFO"), file(true)] {
                        let not_a_file = matches!(sink, Sink::NotAFile(_)).then_some("a FIFO");
                        assert_eq!(
                            refusal(forced, https, ktls, not_a_file).is_ok(),
                            select(forced, https, ktls, &sink).is_ok(),
                            "{forced:?} https={https} ktls={ktls:?} {sink:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn only_buffered_and_splice_open_without_o_direct() {
        let plain: Vec<_> = ALL.into_iter().filter(|f| !opens_direct(*f)).collect();
        assert_eq!(plain, [Some(Buffered), Some(Splice)]);
        assert!(!needs_ktls_probe(None, false));
        assert!(!needs_ktls_probe(Some(Direct), true));
        assert!(!needs_ktls_probe(Some(Buffered), true));
        assert!(needs_ktls_probe(Some(Splice), true));
    }
}
