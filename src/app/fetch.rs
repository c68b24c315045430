//! The fetch step of one file ([`Fetching`]): its transfer started on a reactor, started
//! again after each redirect (without the mirrors left out), and finished
//! ([`super::finish::finish`]) when it is done. The one-file path runs it to the end at
//! once ([`fetch`]); a list hands its starts to the reactor's lanes and its ends back here
//! ([`Fetching::ended`]).

use std::os::fd::AsRawFd;
use std::rc::Rc;

use super::route::{hop_headers, leave_out, mirror_route};
use super::{PerRun, Prepared, finish, updates};
use crate::config::Config;
use crate::engine::EngineKind;
use crate::err;
use crate::error::Result;
use crate::event::{self as download, Outcome, Start, Summary};
use crate::output::Output;
use crate::report::{MirrorReport, Progress, Record};

/// One file between its prepare and its finish.
pub(super) struct Fetching {
    opts: Rc<Config>,
    /// Each URL given (with its credentials), where it points now, and its redirects.
    given: Vec<(http::Url, Option<crate::config::Credentials>)>,
    urls: Vec<http::Url>,
    hops: Vec<u32>,
    /// Mirrors left out before a transfer started (no address, a refused redirect).
    left_out: Vec<MirrorReport>,
    plan: Option<crate::signed::Plan>,
    signed_input: Option<crate::signature::Input>,
    special: Option<crate::output::Special>,
    /// The lock on the `.part`, held until the file is done.
    _lock: Option<crate::output::PartLock>,
    control: Option<std::path::PathBuf>,
    resume_state: Option<crate::output::resume::State>,
    /// The output (shared with the transfer while it runs).
    out: Rc<Output>,
    engine: EngineKind,
    ktls_on: bool,
    engine_note: &'static str,
    /// The file's progress and notes (lent to its transfer while it runs).
    progress: Progress,
    /// Body bytes received and wall time of its transfers stopped to start again spread
    /// ([`Outcome::Recalled`]): counted in its summary with the last one's.
    carried: (u64, std::time::Duration),
    /// Its transfer was stopped so ([`Fetching::unstarted`]).
    recalled: bool,
}

/// What comes after a transfer's end.
pub(super) enum Next {
    /// A redirect to follow: this transfer to start.
    Again(Box<Start>),
    /// The file is done (landed, not modified, or failed).
    Done(Result<()>),
}

impl Fetching {
    /// The fetch step of prepared file `p`; its progress line is drawn unless `lines_off`
    /// (a list with several files in flight draws one line for the run).
    pub(super) fn new(p: Prepared, files: Option<(usize, usize)>, lines_off: bool) -> Fetching {
        let mut progress = Progress::new(p.opts.quiet, p.opts.verbose);
        if let Some((done, total)) = files {
            progress.files(done, total);
        }
        if lines_off {
            // (Several files in flight: each note says whose it is.)
            progress.lines_off();
            if let Some(path) = &p.out.final_path {
                progress.label(crate::report::Flight::name_of(&path.to_string_lossy()));
            }
        }
        if let Some(line) = &p.engine_line {
            progress.say(line);
        }
        Fetching {
            urls: p.given.iter().map(|g| g.0.clone()).collect(),
            hops: vec![0; p.given.len()],
            given: p.given,
            opts: Rc::from(p.opts),
            left_out: Vec::new(),
            plan: p.plan,
            signed_input: p.signed_input,
            special: p.special,
            _lock: p.lock,
            control: p.control,
            resume_state: p.resume_state,
            out: Rc::new(p.out),
            engine: p.engine,
            ktls_on: p.ktls_on,
            engine_note: p.engine_note,
            progress,
            carried: (0, std::time::Duration::ZERO),
            recalled: false,
        }
    }

    /// The file was never fetched (its run stopped first): an output that holds nothing
    /// goes.
    pub(super) fn give_up(self) {
        self.out.discard_if_empty();
    }

    /// Its run stopped before the transfer handed over started (SIGINT, the run's
    /// failure): `None` when it never ran ([`Fetching::give_up`]); for a file whose
    /// transfer was stopped to start again spread ([`Outcome::Recalled`]), how it ends —
    /// interrupted, what landed kept for `-c` — with `record` given its bytes fetched.
    pub(super) fn unstarted(self, record: &mut Record) -> Option<crate::error::Error> {
        if !self.recalled {
            self.give_up();
            return None;
        }
        record.fetched = Some(self.carried.0);
        Some(err!(
            Interrupted,
            "interrupted before it started again spread over the reactors; what landed is kept in {}: run the same \
             command again to fetch only the rest",
            self.out.describe()
        ))
    }

    /// The transfer to start now: the URLs routed (a mirror whose name does not resolve is
    /// left out while others are left).
    ///
    /// # Errors
    /// `Network` when no mirror resolves; what routing returns (a bad proxy). The output
    /// is discarded if it holds nothing.
    pub(super) fn start(&mut self, per_run: &mut PerRun) -> Result<Start> {
        loop {
            let headers: Vec<Vec<(String, String)>> = self
                .given
                .iter()
                .zip(&self.urls)
                .map(|((first, creds), url)| hop_headers(&self.opts, creds.as_ref(), first, url))
                .collect();
            let mut routes = Vec::with_capacity(self.urls.len());
            let mut unresolved = Vec::new();
            for (k, url) in self.urls.iter().enumerate() {
                match mirror_route(url, &headers[k], &self.opts, &mut per_run.tls) {
                    Ok(r) => routes.push(r),
                    Err(e) if self.urls.len() > 1 && e.kind == crate::error::Kind::Network => {
                        unresolved.push((k, e.msg))
                    }
                    Err(e) => {
                        self.out.discard_if_empty();
                        return Err(e);
                    }
                }
            }
            if unresolved.is_empty() {
                return Ok(Start {
                    mirrors: routes,
                    opts: Rc::clone(&self.opts),
                    out: Rc::clone(&self.out),
                    resume: self.resume_state.clone(),
                    control: self.control.clone(),
                    engine: self.engine,
                    ktls: self.ktls_on,
                    signed: self.signed_input,
                    report: std::mem::replace(&mut self.progress, Progress::new(true, 0)),
                    part: None,
                    whole: None,
                });
            }
            if routes.is_empty() {
                self.out.discard_if_empty();
                return Err(err!(Network, "no mirror left: {}", unresolved[0].1));
            }
            // Mirrors whose name does not resolve are left out before the transfer.
            for (k, why) in unresolved.into_iter().rev() {
                let url = self.urls.remove(k);
                self.given.remove(k);
                self.hops.remove(k);
                self.left_out.push(leave_out(url, why, &mut self.progress));
            }
        }
    }

    /// Takes the end `r` of the file's transfer (its `report` back, and what a failed one
    /// knew): a redirect is followed (the next transfer to start), anything else ends the
    /// file — a landed one is finished ([`finish::finish`]) into `record`.
    pub(super) fn ended(
        &mut self,
        r: Result<Outcome>,
        report: Progress,
        failed: Option<Box<Summary>>,
        record: &mut Record,
        per_run: &mut PerRun,
    ) -> Next {
        self.progress = report;
        if self.out.room.is_some() {
            // Until a check fails or the image stops short ([`finish::finish`], below).
            record.device_holds_unverified_bytes = Some(false);
        }
        let mut failed = failed;
        for s in failed.iter_mut() {
            s.fetched += self.carried.0;
            s.elapsed += self.carried.1;
        }
        let mut s = match r {
            Ok(Outcome::Done(s)) => s,
            Ok(Outcome::Recalled) => return self.again_spread(failed, record, per_run),
            Ok(Outcome::NotModified { mirror, kept, summary }) => {
                record.fill(&self.urls[mirror], self.engine, &summary);
                // (Its size and `fetched` are the kept file's: `not_modified` says them.)
                record.bytes = None;
                return self.not_modified(mirror, kept, record);
            }
            Ok(Outcome::Redirect { mirror, to }) => {
                return match self.redirect(mirror, to, record) {
                    Ok(()) => match self.start(per_run) {
                        Ok(st) => Next::Again(Box::new(st)),
                        Err(e) => Next::Done(Err(e)),
                    },
                    Err(e) => Next::Done(Err(e)),
                };
            }
            Err(mut e) => {
                self.progress.clear();
                self.out.discard_if_empty();
                if self.out.room.is_some() && failed.as_ref().is_some_and(|s| s.bytes > 0) {
                    record.device_holds_unverified_bytes = Some(true);
                    e.msg
                        .push_str(&format!("; {} now holds an incomplete image", self.out.describe()));
                }
                // What the transfer knew when it failed (bytes kept, TLS, connections…).
                if let Some(s) = &failed {
                    self.fill_failed(record, s);
                }
                return Next::Done(Err(e));
            }
        };
        s.fetched += self.carried.0;
        s.elapsed += self.carried.1;
        // With mirrors the body came from the reference (the first given may be dropped).
        let k = s.reference.unwrap_or(0);
        let landing = finish::Landing {
            opts: &self.opts,
            plan: self.plan.as_ref(),
            control: self.control.as_deref(),
            special: self.special.as_ref(),
            engine: self.engine,
            engine_note: self.engine_note,
            url: &self.urls[k],
            redirects: self.hops[k],
            left_out: &self.left_out,
            renamed: per_run.renamed.as_mut(),
            progress: &mut self.progress,
        };
        let out = Rc::get_mut(&mut self.out).expect("the transfer has ended: the output is the file's alone");
        Next::Done(finish::finish(s, out, landing, record))
    }

    /// Mirror `mirror`'s first answer kept the file there: a 304 to the condition, or the
    /// size of a list's file already there ([`Config::kept`]). The file is checked as a
    /// fetched one is (`kept`: its read-back, for `--checksum` and `--signature`), into
    /// `record`: exit 9 or 10 when it fails, the file left as it is.
    fn not_modified(&mut self, mirror: usize, kept: Option<Box<download::Kept>>, record: &mut Record) -> Next {
        self.progress.clear();
        let path = self.out.final_path.as_deref().map(|p| p.display().to_string());
        let name = path.clone().unwrap_or_else(|| self.out.describe());
        if let Err(e) = self.kept_is_there(kept.is_some(), &name) {
            self.out.discard_if_empty();
            return Next::Done(Err(e));
        }
        let checked = match &kept {
            Some(k) => {
                record.bytes = Some(k.bytes);
                let owed = finish::Owed {
                    digest: k.digest.as_ref().map(AsRef::as_ref),
                    signed: k.signed.as_ref(),
                };
                let note = format!("{name} is left as it is");
                finish::verify(
                    &self.opts,
                    self.plan.as_ref(),
                    owed,
                    (&name, (note.clone(), note)),
                    record,
                )
            }
            None => Ok(()),
        };
        self.out.discard_if_empty();
        record.final_url = Some(self.urls[mirror].to_string());
        record.fetched = Some(0);
        record.not_modified = true;
        if let Some(size) = self.opts.kept {
            record.bytes = Some(size);
        }
        if let Err(mut e) = checked {
            e.msg.push_str(&match self.opts.kept {
                Some(size) => format!(
                    "; it is there with the server's size ({size} bytes) but is not the file checked for: \
                     --force fetches it again"
                ),
                None => format!(
                    "; the server answered 304 Not Modified ({}), but the file kept fails its check: fetch \
                     it again with --force and without -N/--etag-compare",
                    updates::condition_text(&self.opts)
                ),
            });
            return Next::Done(Err(e));
        }
        match (self.opts.kept, &path) {
            (Some(size), Some(p)) if self.opts.verbose > 0 => self.progress.say(&format!(
                "{p}: already there, {size} bytes, the same size as on the server{}: not fetched again",
                self.opts
                    .checksum
                    .as_ref()
                    .map_or(String::new(), |c| format!(", {} verified", c.name))
            )),
            (Some(_), _) => {}
            (None, _) => updates::say_not_modified(&self.opts, &self.out, &self.urls[mirror]),
        }
        Next::Done(Ok(()))
    }

    /// Whether the file a first answer kept (a 304, a list's file there) may count as
    /// kept: it was read back when a check over it is owed (`--checksum`, a `--signature`
    /// over the file), and a regular file is still at its path (not removed since the
    /// request went out). A device is not looked at.
    ///
    /// # Errors
    /// `Internal` when a check is owed and nothing was read back (never an exit 0
    /// unchecked); `LocalIo` when the file is gone or is no longer a regular file.
    fn kept_is_there(&self, read_back: bool, name: &str) -> Result<()> {
        if (self.opts.checksum.is_some() || self.signed_input.is_some()) && !read_back {
            return Err(err!(
                Internal,
                "{name} kept by the server's answer was not read back for --checksum/--signature: not checked"
            ));
        }
        let Some(p) = self.out.final_path.as_deref().filter(|_| self.out.room.is_none()) else {
            return Ok(());
        };
        match std::fs::metadata(p) {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(err!(
                LocalIo,
                "{name} is no longer a regular file: the server's answer kept a file that is not there"
            )),
            Err(e) => Err(err!(
                LocalIo,
                "{name} is gone ({e}) since its request went out: the server's answer kept a file that is not there; \
                 run the same command again to fetch it"
            )),
        }
    }

    /// What a transfer that failed knew (bytes kept, TLS, connections…), into `record`.
    fn fill_failed(&self, record: &mut Record, s: &Summary) {
        let k = s.reference.unwrap_or(0);
        record.fill(&self.urls[k], self.engine, s);
        record.redirects = self.hops[k].into();
        record.mirrors = s.mirrors.clone();
        record.mirrors.extend(self.left_out.iter().cloned());
    }

    /// Its transfer was stopped to start again spread over the reactors
    /// ([`Outcome::Recalled`]; `failed`: what it knew): the resume from what landed, as
    /// its control file says now — not while writes of the stopped transfer may still land
    /// (they would race the new one's), nor when the control file cannot be read; then
    /// the file ends with why, what landed kept.
    fn again_spread(&mut self, failed: Option<Box<Summary>>, record: &mut Record, per_run: &mut PerRun) -> Next {
        self.recalled = true;
        let kept = format!(
            "what landed is kept in {}: run the same command again to fetch only the rest",
            self.out.describe()
        );
        if let Some(s) = &failed {
            self.carried = (s.fetched, s.elapsed);
        }
        let e = if failed.as_ref().is_some_and(|s| s.writes_pending) {
            err!(
                LocalIo,
                "stopped to start again spread over the reactors, its writes did not complete within 10 s; {kept}"
            )
        } else if let Err(e) = self.reload_resume() {
            e
        } else {
            // (As a resume by `-c`: the `.part`'s validator proves it; no precondition,
            // and no file there to keep on its size.)
            if self.opts.condition.is_some() || self.opts.kept.is_some() {
                let mut o = (*self.opts).clone();
                (o.condition, o.kept) = (None, None);
                self.opts = Rc::new(o);
            }
            match self.start(per_run) {
                Ok(st) => return Next::Again(Box::new(st)),
                Err(mut e) => {
                    e.msg.push_str(&format!("; {kept}"));
                    e
                }
            }
        };
        if let Some(s) = &failed {
            self.fill_failed(record, s);
        }
        Next::Done(Err(e))
    }

    /// The resume state of the `.part` as its control file names it now (after a transfer
    /// stopped to start again: [`Outcome::Recalled`]).
    ///
    /// # Errors
    /// `LocalIo` when the control file cannot be read or parsed (the `.part` and the
    /// control file stay: `-c` resumes them).
    fn reload_resume(&mut self) -> Result<()> {
        let Some(c) = &self.control else {
            return Ok(());
        };
        self.resume_state = crate::output::resume::load(c).map_err(|e| err!(LocalIo, "{}: {e}", c.display()))?;
        Ok(())
    }

    /// Mirror `mirror`'s first answer redirected to `to`: followed, or refused (too many
    /// hops, https to http without `--allow-downgrade`) — a refused mirror is left out
    /// while others are left.
    ///
    /// # Errors
    /// `Protocol` when the refused one is the only URL.
    fn redirect(&mut self, mirror: usize, to: http::Url, record: &mut Record) -> Result<()> {
        self.hops[mirror] += 1;
        let url = &self.urls[mirror];
        let refuse = if self.hops[mirror] > self.opts.max_redirects {
            Some(format!(
                "more than {} redirects (last to {to})",
                self.opts.max_redirects
            ))
        } else if url.scheme() == http::Scheme::Https && to.scheme() == http::Scheme::Http && !self.opts.allow_downgrade
        {
            Some(format!(
                "refusing redirect from https to http: {to} (--allow-downgrade follows it)"
            ))
        } else {
            None
        };
        match refuse {
            Some(m) if self.urls.len() > 1 => {
                let url = self.urls.remove(mirror);
                self.given.remove(mirror);
                self.hops.remove(mirror);
                self.left_out.push(leave_out(url, m, &mut self.progress));
                return Ok(());
            }
            Some(m) => {
                self.out.discard_if_empty();
                return Err(err!(Protocol, "{m}"));
            }
            None => {}
        }
        if self.opts.verbose > 0 {
            eprintln!("ringdl: redirected to {to}");
        }
        self.urls[mirror] = to;
        if mirror == 0 {
            record.redirects = self.hops[0].into();
        }
        Ok(())
    }
}

/// Runs the transfer of `p` (again after each redirect, without the mirrors left out)
/// and finishes the file ([`finish::finish`]).
///
/// # Errors
/// What the transfer or the finish returns; `Network` when no mirror is left.
pub(super) fn fetch(p: Prepared, record: &mut Record, per_run: &mut PerRun) -> Result<()> {
    let mut f = Fetching::new(p, per_run.files, false);
    let mut st = f.start(per_run)?;
    loop {
        let signals = Some(per_run.signals.as_raw_fd());
        let (r, report, failed) = crate::reactors::run(st, signals, &mut per_run.reactor);
        match f.ended(r, report, failed, record, per_run) {
            Next::Again(next) => st = *next,
            Next::Done(r) => return r,
        }
    }
}
