//! A connection's life on the ring: CONNECT, SEND/RECV completions (received bytes go to
//! the read block, or to the data path: [`crate::engine::sink`]), driving it on, close.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use uring::{Buf, Completion, Op};

use crate::control::body::{finish_job, with_placer};
use crate::control::ctx::Ctx;
use crate::control::handoff::pump_soft;
use crate::control::origin::ATTEMPT_DELAY;
use crate::control::resolve;
use crate::control::response::feed;
use crate::control::session::pump_tls;
use crate::control::tunnel::{start_tls, start_tunnel, tunnel_answer};
use crate::control::{Conn, Fail, InFlight, Pumped, St, Tls, Tunnel};
use crate::engine::place::{Delimiter, Fed, Placer};
use crate::engine::sink::Sink;
use crate::err;
use crate::error::{Kind, Result};
use crate::event::{Loop, Shared, errno};
use crate::report::Note;
use crate::tag::Tag;

/// Where driving a connection stands after one of its steps.
enum Drive {
    /// State changed: drive it again.
    Again,
    /// It has an operation in flight, or nothing to do: stop.
    Stop,
    /// Go on to the next step of this turn.
    On,
}

impl Shared {
    /// Lends what a connection's response and body may change ([`Ctx`]), with the data
    /// path `sink`, to `f`; a download the call gave up on ([`Ctx::gave_up`]) becomes the
    /// transfer's fatal error. Returns what `f` returned.
    pub(crate) fn lend<R>(&mut self, sink: &mut Sink, f: impl FnOnce(&mut Ctx<'_>) -> R) -> R {
        let Shared {
            report,
            opts,
            fatal,
            origins,
            transfer,
            ktls,
            tls_full,
            tls_resumed,
            soft_rekeys,
            ..
        } = self;
        let mut ctx = Ctx {
            report,
            opts,
            sink,
            gave_up: None,
            origins,
            transfer,
            ktls: *ktls,
            tls_full,
            tls_resumed,
            soft_rekeys,
        };
        let r = f(&mut ctx);
        if let Some(e) = ctx.gave_up {
            *fatal = Some(e);
        }
        r
    }
}

impl Loop<'_> {
    pub(crate) fn connect(&mut self, i: usize) -> Result<()> {
        let c = &mut self.conns[i];
        let k = c.mirror;
        let origin = &mut self.shared.origins[self.shared.transfer.mirrors[k].origin];
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
        c.input_start = 0;
        c.input_end = 0;
        c.out.clear();
        c.last_io = Instant::now();
        let timeout = Duration::from_secs_f64(self.shared.opts.connect_timeout_s);
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
        self.shared.origin(k).next_attempt(&trying, backing_off, now)
    }

    /// Connection `i`'s operation completed (`cq`): the SEND, RECV, SPLICE or CONNECT it
    /// had in flight, handled by what it was.
    pub(crate) fn conn_completion(&mut self, i: usize, cq: Completion) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        let op = std::mem::replace(&mut c.op, InFlight::Idle);
        c.last_io = Instant::now();
        let res = cq.result;
        // A paced read took its tokens when it was posted: what it did not fill goes back.
        // (A RECVMSG of a kTLS record is not paced in advance: it pays now.)
        let taken = std::mem::take(&mut c.pace_taken);
        self.sink.pace_settle(taken, res, op == InFlight::RecvMsg);
        if let Some(data) = cq.data {
            return self.send_done(i, data, res);
        }
        if let Some(buf) = cq.buf {
            return self.recv_done(i, op, buf, res, cq.control);
        }
        if op == InFlight::Splice {
            return self.splice_done(i, res);
        }
        if self.conns[i].st == St::Connecting {
            return self.connect_done(i, res);
        }
        Ok(())
    }

    /// A SEND came back with `res`: its Vec (`data`) is the connection's out buffer again,
    /// holding what was not sent.
    fn send_done(&mut self, i: usize, mut data: Vec<u8>, res: i32) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        if res >= 0 && (res as usize) < data.len() {
            data.drain(..res as usize);
        } else {
            data.clear();
        }
        c.out = data;
        if res < 0 {
            return Err(self.io_fail(i, "send", res));
        }
        Ok(())
    }

    /// A RECV (or a kTLS RECVMSG, `op`) came back with `res` and its buffer: the read
    /// block, or a write block the data path lent.
    fn recv_done(
        &mut self,
        i: usize,
        op: InFlight,
        buf: Buf,
        res: i32,
        control: Option<Vec<u8>>,
    ) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        if op == InFlight::RecvMsg {
            c.rbuf = Some(buf);
            return self.record_completion(i, res, control.unwrap_or_default());
        }
        // kTLS: a non-data record (alert, NewSessionTicket, KeyUpdate) is at the head.
        let non_data = c.tls.is_kernel() && res == -rustix::io::Errno::IO.raw_os_error();
        if op == InFlight::RecvDirect && c.tls.is_soft() {
            if res < 0 {
                let r = self.open_received(i, buf, 0);
                return Err(r.err().unwrap_or_else(|| self.io_fail(i, "recv", res)));
            }
            if res > 0 {
                self.conns[i].failures = 0;
            }
            return self.open_received(i, buf, res);
        }
        if op == InFlight::RecvDirect {
            let n = if res > 0 { res as usize } else { 0 };
            self.shared.lend(&mut self.sink, |ctx| {
                with_placer(&mut c.rx, ctx, |p, blocks| {
                    p.recv_done(buf, n);
                    if n > 0 { p.settle(blocks) } else { Ok(Fed::More) }
                })
            })?;
        } else {
            c.rbuf = Some(buf);
        }
        if non_data {
            return self.read_record(i);
        }
        if res < 0 {
            return Err(self.io_fail(i, "recv", res));
        }
        let c = &mut self.conns[i];
        if op == InFlight::RecvDirect {
            if res == 0 {
                c.eof = true;
            }
            return Ok(());
        }
        // (A proxy's answer while the tunnel opens is no progress: a proxy that refuses
        // every tunnel must still run out of tries.)
        if res > 0 && c.st != St::Tunnel {
            c.failures = 0;
        }
        if res == 0 {
            c.eof = true;
        } else {
            c.input_end += res as usize;
        }
        Ok(())
    }

    /// Software TLS: a RECV of `res` bytes of ciphertext into the write block `buf` came
    /// back (0 at the end of the stream, or after an error): the record layer opens what
    /// it can in place ([`crate::engine::record::SoftTls::open_in_block`]) and this
    /// applies what it did to the connection.
    fn open_received(&mut self, i: usize, buf: Buf, res: i32) -> std::result::Result<(), Fail> {
        let n = if res > 0 { res as usize } else { 0 };
        let Conn {
            tls,
            rbuf,
            input_start,
            input_end,
            out,
            rx,
            clean_close,
            eof,
            ..
        } = &mut self.conns[i];
        let soft = tls.soft_mut().expect("a soft-TLS connection");
        let read = rbuf
            .as_mut()
            .expect("the read block stays while a RECV into the write block is out");
        let mut opened = None;
        let placed = self.shared.lend(&mut self.sink, |ctx| {
            with_placer(rx, ctx, |p, blocks| {
                let mut o = soft.open_in_block(p, blocks, buf, n, read, out);
                let fed = std::mem::replace(&mut o.fed, Ok(Fed::More));
                opened = Some(o);
                fed
            })
        });
        let opened = opened.expect("the record layer ran");
        if opened.closed {
            *clean_close = true;
            *eof = true;
        }
        if let Some(k) = opened.carried {
            (*input_start, *input_end) = (0, k);
        }
        placed?;
        self.shared.soft_rekeys += opened.rekeys;
        if let Some(e) = opened.failed {
            return Err(Fail::retry(e.kind, e.msg));
        }
        if res == 0 {
            *eof = true;
        }
        Ok(())
    }

    /// Engine splice: a socket → pipe SPLICE came back with `res`: the body moves on by
    /// what it brought, and the pipe drains when it holds enough.
    fn splice_done(&mut self, i: usize, res: i32) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        if c.tls.is_kernel() && res == -rustix::io::Errno::INVAL.raw_os_error() {
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
        self.shared.lend(&mut self.sink, |ctx| {
            with_placer(&mut c.rx, ctx, |p, _| {
                p.advance(n);
                Ok(Fed::More)
            })
        })?;
        self.drain(i).map_err(|e| Fail::fatal(e.kind, e.msg))?;
        let rx = &mut self.conns[i].rx;
        self.shared
            .lend(&mut self.sink, |ctx| with_placer(rx, ctx, Placer::settle))?;
        Ok(())
    }

    /// A CONNECT came back with `res`: on to the tunnel or TLS, or why it failed.
    fn connect_done(&mut self, i: usize, res: i32) -> std::result::Result<(), Fail> {
        let c = &self.conns[i];
        let (k, mirror) = (c.addr, c.mirror);
        let origin = self.shared.origin(mirror);
        if res < 0 && c.cancel_sent && origin.addr_proven && origin.addr_next != k {
            // Another address answered first: this attempt was cancelled (RFC 8305 §5);
            // the connection goes where the winner went, and no try is spent.
            let (addr, winner) = (origin.addrs[k], origin.addrs[origin.addr_next]);
            self.shared.report.note(Note::Abandoned { conn: i, addr, winner });
            // The slot goes back to the spares: `kick` opens it again only when the
            // download wants another connection.
            self.close(i);
            self.conns[i].engaged = false;
            return Ok(());
        }
        if res < 0 {
            return Err(self.connect_failed(i, res));
        }
        // The origin answers again: its connects start a new count.
        self.shared.transfer.mirrors[mirror].connects_failed = 0;
        let origin = self.shared.origin_mut(mirror);
        if !origin.addr_proven {
            origin.addr_next = k;
            origin.addr_proven = true;
            let addr = origin.addrs[k];
            if k != 0 {
                self.shared.report.note(Note::Connected {
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
        if self.shared.origin(mirror).tunnel() {
            return start_tunnel(&mut self.conns[i], self.shared.origin(mirror), self.shared.url(mirror));
        }
        self.conns[i].st = St::Open;
        start_tls(&mut self.conns[i], self.shared.origin(mirror))
    }

    /// Connection `i`'s CONNECT failed with `res`: why, and whether the server turned it
    /// away (refused where connects went through) or nothing listens there (the next
    /// address is tried).
    fn connect_failed(&mut self, i: usize, res: i32) -> Fail {
        let c = &mut self.conns[i];
        let k = c.addr;
        let origin = &mut self.shared.origins[self.shared.transfer.mirrors[c.mirror].origin];
        let addr = origin.addrs[k];
        let n_addrs = origin.addrs.len();
        let e = errno(res);
        c.failed_connects += 1;
        let to = match &origin.proxy {
            Some(p) => format!("proxy {} ({addr})", p.url),
            None => addr.to_string(),
        };
        let mut msg = if e == rustix::io::Errno::CANCELED {
            format!(
                "connect to {to}: timed out after {} s",
                self.shared.opts.connect_timeout_s
            )
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
        if cap { f.busy() } else { f }
    }

    pub(crate) fn io_fail(&self, i: usize, what: &str, res: i32) -> Fail {
        let c = &self.conns[i];
        let e = errno(res);
        if e == rustix::io::Errno::CANCELED && c.cancel_sent {
            let mut f = Fail::retry(
                Kind::Network,
                format!("no data for {} s: connection reset", self.shared.opts.stall_timeout_s),
            );
            f.stalled = true;
            return f;
        }
        let f = Fail::retry(
            Kind::Network,
            format!("{what} from {}: {e}", self.shared.url(c.mirror).host()),
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
            if self.shared.fatal.is_some() || self.shared.transfer.redirect.is_some() {
                return Ok(());
            }
            let c = &mut self.conns[i];
            if c.busy() || !matches!(c.st, St::Open | St::Tunnel) {
                return Ok(());
            }
            if !c.out.is_empty() {
                return self.send(i);
            }
            let step = if c.st == St::Tunnel {
                self.drive_tunnel(i)?
            } else if c.rx.job.as_ref().is_some_and(|j| j.placer.has_spill()) {
                // Input held back by an empty write pool goes first.
                let rx = &mut c.rx;
                if self
                    .shared
                    .lend(&mut self.sink, |ctx| with_placer(rx, ctx, Placer::retry_spill))?
                    == Fed::Blocked
                {
                    self.wait_for_block(i);
                    return Ok(());
                }
                Drive::Again
            } else {
                match self.pump(i)? {
                    Drive::On => self.drive_on(i)?,
                    step => step,
                }
            };
            match step {
                Drive::Again => continue,
                Drive::Stop | Drive::On => return Ok(()),
            }
        }
    }

    /// SENDs connection `i`'s `out` bytes.
    fn send(&mut self, i: usize) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
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
            .map_err(|_| Fail::fatal(Kind::Internal, "submission queue full"))
    }

    /// Through a proxy, an https connection first waits for its tunnel: reads the proxy's
    /// answer, sends the next SOCKS5 message, or starts TLS once the tunnel is open.
    fn drive_tunnel(&mut self, i: usize) -> std::result::Result<Drive, Fail> {
        let k = self.conns[i].mirror;
        // (Requests of other transfers and of other reactors (`--threads`) to the
        // origin go through the same proxy: their tunnels are open too, so a refused
        // tunnel with others open is the proxy's crowd, not a proxy that refuses
        // every tunnel.)
        let others_open = self.shared.origin(k).elsewhere() > 0
            || self
                .conns
                .iter()
                .enumerate()
                .any(|(j, o)| j != i && o.mirror == k && matches!(o.st, St::Open | St::Tunnel));
        let (origin, url) = (self.shared.origin(k), self.shared.url(k));
        match tunnel_answer(
            &mut self.conns[i],
            i,
            origin,
            url,
            self.shared.opts.verbose,
            others_open,
        )? {
            Tunnel::NeedMore => {
                self.post_recv(i)?;
                return Ok(Drive::Stop);
            }
            Tunnel::Sent => {}
            Tunnel::Open => start_tls(&mut self.conns[i], origin)?,
        }
        // (A SOCKS5 step may have queued its next message: send it.)
        let c = &self.conns[i];
        if c.st == St::Tunnel && (c.busy() || c.out.is_empty()) {
            return Ok(Drive::Stop);
        }
        Ok(Drive::Again)
    }

    /// Runs connection `i`'s TLS layer (rustls, or the software record layer) over its
    /// buffered input, or gives plain input to the response.
    fn pump(&mut self, i: usize) -> std::result::Result<Drive, Fail> {
        let c = &mut self.conns[i];
        let pumped = match &c.tls {
            Tls::Rustls(_) | Tls::RustlsKept(_) => {
                let tls_info = &mut self.tls_info;
                self.shared.lend(&mut self.sink, |ctx| pump_tls(c, ctx, tls_info))?
            }
            Tls::Soft(_) => match self.shared.lend(&mut self.sink, |ctx| pump_soft(c, ctx))? {
                Pumped::HandOff => Pumped::NeedData,
                p => p,
            },
            Tls::Off | Tls::Kernel(_) if c.input_start < c.input_end => {
                let rbuf = c.rbuf.take().expect("idle connection holds its read block");
                let (lo, hi) = (c.input_start, c.input_end);
                let r = self
                    .shared
                    .lend(&mut self.sink, |ctx| feed(&mut c.rx, ctx, &rbuf[lo..hi]));
                c.rbuf = Some(rbuf);
                c.input_start = c.input_end;
                r?;
                return Ok(Drive::Again);
            }
            Tls::Off | Tls::Kernel(_) => return Ok(Drive::On),
        };
        match pumped {
            Pumped::Again => Ok(Drive::Again),
            Pumped::Blocked => {
                self.wait_for_block(i);
                Ok(Drive::Stop)
            }
            Pumped::NeedData => Ok(Drive::On),
            Pumped::PeerClosed => {
                self.conns[i].eof = true;
                Ok(Drive::On)
            }
            Pumped::HandOff => {
                self.hand_off(i)?;
                Ok(Drive::Again)
            }
        }
    }

    /// Connection `i`'s input is processed: ends its response or the connection at the
    /// end of the stream, gives an idle one its next request, or posts the next read.
    fn drive_on(&mut self, i: usize) -> std::result::Result<Drive, Fail> {
        let c = &mut self.conns[i];
        let handshaking = c.tls.is_handshaking();
        if c.eof {
            if c.rx.job.is_some() {
                self.on_eof(i)?;
                return Ok(Drive::Stop);
            }
            if handshaking {
                return Err(Fail::retry(Kind::Network, "connection closed during the TLS handshake"));
            }
            // An idle keep-alive connection the server closed.
            self.recycle(i)?;
            return Ok(Drive::Stop);
        }
        if c.rx.job.is_none() && !handshaking {
            if c.rx.extra {
                self.recycle(i)?;
                return Ok(Drive::Stop);
            }
            if c.idle_since.is_none() {
                c.idle_since = Some(Instant::now());
            }
            return Ok(if self.assign(i)? { Drive::Again } else { Drive::Stop });
        }
        if c.rx.job.as_ref().is_some_and(|j| j.placer.has_spill()) {
            self.wait_for_block(i);
            return Ok(Drive::Stop);
        }
        self.post_recv(i)?;
        Ok(Drive::Stop)
    }

    /// The peer closed (FIN or TLS close_notify) while a job was open.
    pub(crate) fn on_eof(&mut self, i: usize) -> std::result::Result<(), Fail> {
        let c = &mut self.conns[i];
        let job = c.rx.job.as_ref().expect("on_eof with a job");
        match job.placer.delimiter() {
            Some(Delimiter::Close) if c.tls.is_on() && !c.clean_close => Err(Fail::retry(
                Kind::Protocol,
                "connection closed without TLS close_notify: the body may be truncated",
            )),
            Some(Delimiter::Close) => {
                self.shared.transfer.total = Some(job.placer.pos());
                self.shared.lend(&mut self.sink, |ctx| finish_job(&mut c.rx, ctx));
                self.recycle(i)
            }
            Some(Delimiter::Length(rem)) => Err(Fail::retry(
                Kind::Network,
                format!("connection closed with {rem} bytes of the response still to come"),
            )),
            Some(Delimiter::Chunked(_)) => Err(Fail::retry(Kind::Network, "connection closed inside a chunked body")),
            // Between the parts of a multi-range answer (its close delimiter missing): what
            // came is kept, the runs not received go back to the queue.
            None if job.multi.as_ref().is_some_and(|m| m.parts > 0) => {
                self.shared.lend(&mut self.sink, |ctx| finish_job(&mut c.rx, ctx));
                self.recycle(i)
            }
            None => Err(Fail::retry(Kind::Network, "connection closed before the response head").closed()),
        }
    }

    /// Closes a connection's socket (the CLOSE is an SQE too).
    pub(crate) fn close(&mut self, i: usize) {
        let c = &mut self.conns[i];
        c.st = St::Closed;
        c.op = InFlight::Idle;
        c.tls = Tls::Off;
        c.socks = None;
        c.eof = false;
        c.rx.extra = false;
        c.input_start = 0;
        c.input_end = 0;
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
