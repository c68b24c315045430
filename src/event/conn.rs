//! A connection's life on the ring: CONNECT, SEND/RECV completions, driving it on, close.

use crate::control::body::*;
use crate::control::ctx::Ctx;
use crate::control::origin::ATTEMPT_DELAY;
use crate::control::resolve;
use crate::control::response::*;
use crate::control::session::*;
use crate::control::tunnel::{start_tls, start_tunnel, tunnel_answer};
use crate::control::*;
use crate::engine::place::{Delimiter, Fed, Placer};
use crate::err;
use crate::error::{Kind, Result};
use crate::event::*;
use crate::report::Note;
use crate::tag::Tag;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use uring::{Completion, Op};

impl Shared {
    /// Lends what a connection's response and body may change ([`Ctx`]) for one call.
    pub(crate) fn ctx(&mut self) -> Ctx<'_> {
        Ctx {
            report: &mut self.report,
            opts: &self.opts,
            pool: &self.pool,
            to_write: &mut self.to_write,
            fatal: &mut self.fatal,
            origins: &self.origins,
            tr: &mut self.tr,
            ktls: self.ktls,
            tls_full: &mut self.tls_full,
            tls_resumed: &mut self.tls_resumed,
            soft_rekeys: &mut self.soft_rekeys,
        }
    }
}

impl Loop<'_> {
    pub(crate) fn connect(&mut self, i: usize) -> Result<()> {
        let c = &mut self.conns[i];
        let k = c.mirror;
        let origin = &mut self.sh.origins[self.sh.tr.mirrors[k].origin];
        // Every connection starts where the download's last good connect went (or, before
        // one, at the next address no connect has failed on yet): a family that fails is
        // paid for once, not once per connection.
        c.addr = origin.addr_next;
        c.deferred = false;
        c.engaged = true;
        let addr = origin.addrs[c.addr];
        let domain = if addr.is_ipv4() {
            rustix::net::AddressFamily::INET
        } else {
            rustix::net::AddressFamily::INET6
        };
        let fd = rustix::net::socket_with(
            domain,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| err!(LocalIo, "socket: {e}"))?;
        let _ = rustix::net::sockopt::set_tcp_nodelay(&fd, true);
        let raw = fd.as_raw_fd();
        c.fd = Some(fd);
        c.st = St::Connecting;
        c.op = InFlight::Connect;
        c.eof = false;
        c.reused = false;
        c.requests = 0;
        c.clean_close = false;
        c.cancel_sent = false;
        c.rlo = 0;
        c.rhi = 0;
        c.out.clear();
        c.last_io = Instant::now();
        let timeout = Duration::from_secs_f64(self.sh.opts.connect_timeout_s);
        self.ring
            .push_with_timeout(Op::Connect { fd: raw, addr }, Tag::Conn(i).encode(), timeout)
            .map_err(|_| err!(Internal, "submission queue full"))?;
        if !origin.addr_proven && origin.addrs.len() > 1 {
            // Happy Eyeballs: if this attempt has not answered after the Connection Attempt
            // Delay, `kick` starts the next address on a deferred connection; this wakes it.
            origin.attempt_started = Some(Instant::now());
            if self.conns.iter().any(|c| c.deferred) {
                self.push(Op::Timeout { after: ATTEMPT_DELAY }, Tag::Ignore.encode())?;
            }
        }
        Ok(())
    }

    /// RFC 8305 §5 (Happy Eyeballs v2): may a deferred connection start now? Returns the
    /// address index to try on mirror `k`'s origin, or `None` to wait; the origin decides
    /// ([`Origin::next_attempt`](crate::control::origin::Origin::next_attempt)) from the
    /// connects in flight to it and whether its round backs off.
    pub(crate) fn next_attempt(&self, k: usize) -> Option<usize> {
        let now = Instant::now();
        let trying: Vec<usize> = self
            .conns
            .iter()
            .filter(|c| c.st == St::Connecting && c.mirror == k)
            .map(|c| c.addr)
            .collect();
        let backing_off = self
            .conns
            .iter()
            .any(|c| c.mirror == k && !c.deferred && !c.dead && c.not_before.is_some_and(|t| t > now));
        self.sh.origin(k).next_attempt(&trying, backing_off, now)
    }

    pub(crate) fn conn_completion(&mut self, i: usize, cq: Completion) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        let op = std::mem::replace(&mut c.op, InFlight::Idle);
        c.last_io = Instant::now();
        let res = cq.result;
        if let Some(bucket) = self.pace.as_mut() {
            // A paced read took its tokens when it was posted: what it did not fill goes
            // back. (A RECVMSG of a kTLS record is not paced in advance: it pays now.)
            let taken = std::mem::take(&mut c.pace_taken);
            let got = u64::try_from(res).unwrap_or(0);
            if taken > 0 {
                bucket.give_back(taken.saturating_sub(got));
            } else if got > 0 && matches!(op, InFlight::RecvMsg) {
                bucket.take(got);
            }
        }
        if let Some(data) = cq.data {
            // A SEND came back: its Vec is the connection's out buffer.
            let mut data = data;
            if res >= 0 && (res as usize) < data.len() {
                data.drain(..res as usize);
                c.out = data;
            } else {
                data.clear();
                c.out = data;
            }
            if res < 0 {
                return Err(self.io_fail(i, "send", res));
            }
            return Ok(());
        }
        if let Some(buf) = cq.buf {
            if op == InFlight::RecvMsg {
                c.rbuf = Some(buf);
                return self.record_completion(i, res, cq.control.unwrap_or_default());
            }
            // kTLS: a non-data record (alert, NewSessionTicket, KeyUpdate) is at the head.
            let non_data = c.kconn.is_some() && res == -rustix::io::Errno::IO.raw_os_error();
            if op == InFlight::RecvDirect && c.soft.is_some() {
                if res < 0 {
                    let r = crate::control::handoff::soft_recv_done(c, &mut self.sh.ctx(), buf, 0);
                    return Err(r.err().unwrap_or_else(|| self.io_fail(i, "recv", res)));
                }
                if res > 0 {
                    c.failures = 0;
                }
                return crate::control::handoff::soft_recv_done(c, &mut self.sh.ctx(), buf, res);
            }
            if op == InFlight::RecvDirect {
                let n = if res > 0 { res as usize } else { 0 };
                with_placer(&mut c.rx, &mut self.sh.ctx(), |p, blocks| {
                    p.recv_done(buf, n);
                    if n > 0 { p.settle(blocks) } else { Ok(Fed::More) }
                })?;
                if non_data {
                    return self.read_record(i);
                }
                if res < 0 {
                    return Err(self.io_fail(i, "recv", res));
                }
                if res == 0 {
                    c.eof = true;
                }
                return Ok(());
            }
            c.rbuf = Some(buf);
            if non_data {
                return self.read_record(i);
            }
            if res < 0 {
                return Err(self.io_fail(i, "recv", res));
            }
            // (A proxy's answer while the tunnel opens is no progress: a proxy that refuses
            // every tunnel must still run out of tries.)
            if res > 0 && c.st != St::Tunnel {
                c.failures = 0;
            }
            if res == 0 {
                c.eof = true;
            } else {
                c.rhi += res as usize;
            }
            return Ok(());
        }
        if op == InFlight::Splice {
            if c.kconn.is_some() && res == -rustix::io::Errno::INVAL.raw_os_error() {
                // SPLICE stops with EINVAL at a non-data record under kTLS RX.
                return self.read_record(i);
            }
            if res < 0 {
                return Err(self.io_fail(i, "splice", res));
            }
            if res == 0 {
                c.eof = true;
                return Ok(());
            }
            let n = res as usize;
            let pipe = c.pipe.as_mut().expect("a splicing connection has a pipe");
            pipe.held += n;
            with_placer(&mut c.rx, &mut self.sh.ctx(), |p, _| {
                p.advance(n);
                Ok(Fed::More)
            })?;
            self.drain(i).map_err(|e| Fail::fatal(e.kind, e.msg))?;
            with_placer(&mut self.conns[i].rx, &mut self.sh.ctx(), Placer::settle)?;
            return Ok(());
        }
        // CONNECT
        if c.st == St::Connecting {
            let k = c.addr;
            let mirror = c.mirror;
            let origin = self
                .sh
                .origins
                .get_mut(self.sh.tr.mirrors[mirror].origin)
                .expect("a mirror's origin");
            let addr = origin.addrs[k];
            let n_addrs = origin.addrs.len();
            if res < 0 && c.cancel_sent && origin.addr_proven && origin.addr_next != k {
                // Another address answered first: this attempt was cancelled (RFC 8305 §5);
                // the connection goes where the winner went, and no try is spent.
                self.sh.report.note(Note::Abandoned {
                    conn: i,
                    addr,
                    winner: origin.addrs[origin.addr_next],
                });
                // The slot goes back to the spares: `kick` opens it again only when the
                // download wants another connection.
                self.close(i);
                self.conns[i].engaged = false;
                return Ok(());
            }
            if res < 0 {
                let e = errno(res);
                c.addr_i += 1;
                let to = match &origin.proxy {
                    Some(p) => format!("proxy {} ({addr})", p.url),
                    None => addr.to_string(),
                };
                let mut msg = if e == rustix::io::Errno::CANCELED {
                    format!("connect to {to}: timed out after {} s", self.sh.opts.connect_timeout_s)
                } else {
                    format!("connect to {to}: {e}")
                };
                let refused = matches!(e, rustix::io::Errno::CONNREFUSED | rustix::io::Errno::CONNRESET);
                // Refused where connects went through before (or where there is nowhere
                // else to go): the server turns this connection away. Refused elsewhere:
                // nothing listens on that address; the next one is tried at once (RFC 8305
                // §5: on to the next address, the other family first).
                let cap = refused && (n_addrs == 1 || (origin.addr_proven && origin.addr_next == k));
                if !cap && n_addrs > 1 {
                    if origin.addr_next == k {
                        origin.addr_next = (k + 1) % n_addrs;
                        origin.addr_proven = false;
                    }
                    let next = origin.addrs[origin.addr_next];
                    if next.is_ipv6() != addr.is_ipv6() {
                        msg.push_str(&format!("; trying {} next: {next}", resolve::family(&next)));
                    } else {
                        msg.push_str(&format!("; trying {next} next"));
                    }
                }
                let mut f = Fail::retry(Kind::Network, msg);
                f.refused = refused;
                return Err(if cap { f.busy() } else { f });
            }
            // The origin answers again: its connects start a new count.
            self.sh.tr.mirrors[mirror].connects_failed = 0;
            if !origin.addr_proven {
                origin.addr_next = k;
                origin.addr_proven = true;
                if k != 0 {
                    self.sh.report.note(Note::Connected {
                        addr,
                        family: resolve::family(&addr),
                    });
                }
                // The attempts still racing to other addresses are called off.
                for j in 0..self.conns.len() {
                    let o = &self.conns[j];
                    if j != i && o.mirror == mirror && o.st == St::Connecting && o.addr != k {
                        self.cancel_op(j).map_err(|e| Fail::fatal(e.kind, e.msg))?;
                    }
                }
            }
            if self.sh.origin(mirror).tunnel() {
                return start_tunnel(&mut self.conns[i], self.sh.origin(mirror), self.sh.url(mirror));
            }
            self.conns[i].st = St::Open;
            return start_tls(&mut self.conns[i], self.sh.origin(mirror));
        }
        Ok(())
    }

    pub(crate) fn io_fail(&self, i: usize, what: &str, res: i32) -> Fail {
        let c = &self.conns[i];
        let e = errno(res);
        if e == rustix::io::Errno::CANCELED && c.cancel_sent {
            let mut f = Fail::retry(
                Kind::Network,
                format!("no data for {} s: connection reset", self.sh.opts.stall_timeout_s),
            );
            f.stalled = true;
            return f;
        }
        let f = Fail::retry(
            Kind::Network,
            format!("{what} from {}: {e}", self.sh.url(c.mirror).host()),
        );
        // A reset before any byte of the response is how some servers turn away a
        // connection beyond their per-client limit.
        let before_response = c.rx.job.as_ref().is_some_and(|j| !j.got_bytes) && c.rx.head.is_empty();
        let f = if e == rustix::io::Errno::CONNRESET && before_response {
            f.busy()
        } else {
            f
        };
        match e {
            rustix::io::Errno::CONNRESET | rustix::io::Errno::PIPE => f.closed(),
            _ => f,
        }
    }

    /// Advances connection `i` until it has an operation in flight or nothing to do.
    pub(crate) fn drive(&mut self, i: usize) -> std::result::Result<(), Fail> {
        loop {
            if self.sh.fatal.is_some() || self.sh.tr.redirect.is_some() {
                return Ok(());
            }
            let c = &mut self.conns[i];
            if c.busy() || !matches!(c.st, St::Open | St::Tunnel) {
                return Ok(());
            }
            if !c.out.is_empty() {
                let fd = c.fd.as_ref().expect("open connection has a socket").as_raw_fd();
                let data = std::mem::take(&mut c.out);
                let len = data.len();
                c.op = InFlight::Send;
                self.ring
                    .push(
                        Op::Send {
                            fd,
                            data,
                            range: 0..len,
                            flags: rustix::net::SendFlags::NOSIGNAL.bits(),
                        },
                        Tag::Conn(i).encode(),
                    )
                    .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"))?;
                return Ok(());
            }
            // Through a proxy, an https connection first waits for its tunnel.
            if c.st == St::Tunnel {
                let k = c.mirror;
                // (Requests of other transfers and of other reactors (`--threads`) to the
                // origin go through the same proxy: their tunnels are open too. A helper
                // whose first tunnel was refused while the owner's two were served took
                // it for a proxy that refuses every tunnel: its parts failed 5 times.)
                let others_open = self.sh.origin(k).elsewhere() > 0
                    || self
                        .conns
                        .iter()
                        .enumerate()
                        .any(|(j, o)| j != i && o.mirror == k && matches!(o.st, St::Open | St::Tunnel));
                let (origin, url) = (self.sh.origin(k), self.sh.url(k));
                match tunnel_answer(&mut self.conns[i], i, origin, url, self.sh.opts.verbose, others_open)? {
                    Tunnel::NeedMore => return self.post_recv(i),
                    Tunnel::Sent => {}
                    Tunnel::Open => start_tls(&mut self.conns[i], origin)?,
                }
                // (A SOCKS5 step may have queued its next message: send it.)
                let c = &self.conns[i];
                if c.st == St::Tunnel && (c.busy() || c.out.is_empty()) {
                    return Ok(());
                }
                continue;
            }
            // Input held back by an empty write pool goes first.
            if c.rx.job.as_ref().is_some_and(|j| j.placer.has_spill()) {
                if with_placer(&mut c.rx, &mut self.sh.ctx(), Placer::retry_spill)? == Fed::Blocked {
                    self.wait_for_block(i);
                    return Ok(());
                }
                continue;
            }
            if c.tls.is_some() {
                match pump_tls(c, &mut self.sh.ctx(), &mut self.tls_info)? {
                    Pumped::Again => continue,
                    Pumped::Blocked => {
                        self.wait_for_block(i);
                        return Ok(());
                    }
                    Pumped::NeedData => {}
                    Pumped::PeerClosed => c.eof = true,
                    Pumped::HandOff => {
                        self.hand_off(i)?;
                        continue;
                    }
                }
            } else if c.soft.is_some() {
                match crate::control::handoff::pump_soft(c, &mut self.sh.ctx())? {
                    Pumped::Again => continue,
                    Pumped::Blocked => {
                        self.wait_for_block(i);
                        return Ok(());
                    }
                    Pumped::NeedData | Pumped::HandOff => {}
                    Pumped::PeerClosed => c.eof = true,
                }
            } else if c.rlo < c.rhi {
                let rbuf = c.rbuf.take().expect("idle connection holds its read block");
                let r = feed(&mut c.rx, &mut self.sh.ctx(), &rbuf[c.rlo..c.rhi]);
                c.rbuf = Some(rbuf);
                c.rlo = c.rhi;
                r?;
                continue;
            }
            let c = &mut self.conns[i];
            let handshaking = c.tls.as_ref().is_some_and(|t| t.is_handshaking());
            if c.eof {
                if c.rx.job.is_some() {
                    return self.on_eof(i);
                }
                if handshaking {
                    return Err(Fail::retry(Kind::Network, "connection closed during the TLS handshake"));
                }
                // An idle keep-alive connection the server closed.
                return self.recycle(i);
            }
            if c.rx.job.is_none() && !handshaking {
                if c.rx.extra {
                    return self.recycle(i);
                }
                if c.idle_since.is_none() {
                    c.idle_since = Some(Instant::now());
                }
                if self.assign(i)? {
                    continue;
                }
                return Ok(());
            }
            if c.rx.job.as_ref().is_some_and(|j| j.placer.has_spill()) {
                self.wait_for_block(i);
                return Ok(());
            }
            return self.post_recv(i);
        }
    }

    /// The peer closed (FIN or TLS close_notify) while a job was open.
    pub(crate) fn on_eof(&mut self, i: usize) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        let job = c.rx.job.as_ref().expect("on_eof with a job");
        match job.placer.delimiter() {
            Some(Delimiter::Close) if (c.tls.is_some() || c.kconn.is_some() || c.soft.is_some()) && !c.clean_close => {
                Err(Fail::retry(
                    Kind::Protocol,
                    "connection closed without TLS close_notify: the body may be truncated",
                ))
            }
            Some(Delimiter::Close) => {
                self.sh.tr.total = Some(job.placer.pos());
                finish_job(&mut c.rx, &mut self.sh.ctx());
                self.recycle(i)
            }
            Some(Delimiter::Length(rem)) => Err(Fail::retry(
                Kind::Network,
                format!("connection closed with {rem} bytes of the response still to come"),
            )),
            Some(Delimiter::Chunked(_)) => Err(Fail::retry(Kind::Network, "connection closed inside a chunked body")),
            None => Err(Fail::retry(Kind::Network, "connection closed before the response head").closed()),
        }
    }

    /// Closes a connection's socket (the CLOSE is an SQE too).
    pub(crate) fn close(&mut self, i: usize) {
        let c = &mut self.conns[i];
        c.st = St::Closed;
        c.op = InFlight::Idle;
        c.tls = None;
        c.socks = None;
        c.kconn = None;
        c.soft = None;
        c.no_ktls = false;
        c.eof = false;
        c.rx.extra = false;
        c.rlo = 0;
        c.rhi = 0;
        c.out.clear();
        c.pending_request.clear();
        if let Some(fd) = c.fd.take() {
            let _ = self.ring.push(Op::Close { fd }, Tag::Ignore.encode());
        }
    }

    /// Closes a connection that cannot carry another request, and opens a new one when
    /// work is left.
    pub(crate) fn recycle(&mut self, i: usize) -> std::result::Result<(), Fail> {
        self.close(i);
        if self.wants_connection() {
            self.connect(i).map_err(|e| Fail::fatal(e.kind, e.msg))?;
        }
        Ok(())
    }
}
