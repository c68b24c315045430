//! Every op against the real kernel, through the safe owned-buffer layer,
//! on both backends: each test body below runs once on io_uring (`on_uring::`)
//! and once on epoll (`on_epoll::`); the few that are about io_uring itself
//! (setup flags, SQPOLL, fixed buffers) run there only.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::mem::MaybeUninit;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use uring::{Backend, BufPool, Completion, Op, PushError, Ring, RingBuilder, SetupFlags, opcode};

const ETIME: i32 = 62;
const ECANCELED: i32 = 125;
const ENOENT: i32 = 2;

fn ring(b: Backend) -> Ring {
    let r = RingBuilder::new(32).backend(b).build().expect("ring setup");
    assert_eq!(r.backend(), b);
    r
}

/// Waits (at most 10 s) for the next completion.
fn wait_one(ring: &mut Ring) -> Completion {
    let start = Instant::now();
    loop {
        if let Some(c) = ring.next_completion() {
            return c;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no completion within 10 s");
        ring.submit_and_wait(1).expect("io_uring_enter");
    }
}

/// A file under /var/tmp removed when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn new(name: &str) -> TempPath {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        TempPath(PathBuf::from(format!(
            "/var/tmp/uring-test-{}-{n}-{name}",
            std::process::id()
        )))
    }
    fn create(&self) -> File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.0)
            .unwrap()
    }
    fn open_direct(&self) -> Option<File> {
        let r = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(&self.0);
        match r {
            Ok(f) => Some(f),
            Err(e) if e.raw_os_error() == Some(22) => {
                eprintln!("skipping: O_DIRECT open gives EINVAL on /var/tmp");
                None
            }
            Err(e) => panic!("open O_DIRECT: {e}"),
        }
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn nop(b: Backend) {
    let mut r = ring(b);
    r.push(Op::Nop, 7).unwrap();
    assert_eq!(r.in_flight(), 1);
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (7, 0));
    assert!(c.buf.is_none() && c.data.is_none() && c.control.is_none());
    assert_eq!(r.in_flight(), 0);
}

fn probe_supports_read_fixed(b: Backend) {
    let p = ring(b).probe().unwrap();
    assert!(p.supports(opcode::ReadFixed::CODE));
    assert!(p.supports(opcode::WriteFixed::CODE));
}

/// Writes two blocks with distinct patterns and reads them back.
fn write_read_round_trip(r: &mut Ring, pool: &BufPool, fd: i32) {
    let bs = pool.block_size();
    for (i, seed) in [(0u64, 1u8), (1, 2)] {
        let mut b = pool.alloc().unwrap();
        b.copy_from_slice(&pattern(seed, bs));
        r.push(
            Op::Write {
                fd,
                buf: b,
                range: 0..bs,
                offset: i * bs as u64,
            },
            i,
        )
        .unwrap();
        let c = wait_one(r);
        assert_eq!(c.result, bs as i32, "write {i}");
        assert!(c.buf.is_some());
    }
    for (i, seed) in [(1u64, 2u8), (0, 1)] {
        let b = pool.alloc().unwrap();
        r.push(
            Op::Read {
                fd,
                buf: b,
                range: 0..bs,
                offset: i * bs as u64,
            },
            10 + i,
        )
        .unwrap();
        let c = wait_one(r);
        assert_eq!((c.tag, c.result), (10 + i, bs as i32));
        assert_eq!(&c.buf.unwrap()[..], &pattern(seed, bs)[..], "block {i}");
    }
    // A sub-range: the middle 4 KiB of block 0 into the tail of a block.
    let b = pool.alloc().unwrap();
    r.push(
        Op::Read {
            fd,
            buf: b,
            range: bs - 4096..bs,
            offset: 4096,
        },
        20,
    )
    .unwrap();
    let c = wait_one(r);
    assert_eq!(c.result, 4096);
    assert_eq!(&c.buf.unwrap()[bs - 4096..], &pattern(1, bs)[4096..8192]);
    assert_eq!(pool.available(), pool.count());
}

fn read_write_buffered_unregistered(b: Backend) {
    let t = TempPath::new("rw");
    let f = t.create();
    let mut r = ring(b);
    let pool = BufPool::new(8192, 4).unwrap();
    assert!(!pool.is_registered());
    write_read_round_trip(&mut r, &pool, f.as_raw_fd());
}

#[test]
fn read_write_fixed_registered_buffered() {
    let b = Backend::Uring;
    let t = TempPath::new("rwf");
    let f = t.create();
    let mut r = ring(b);
    let other = BufPool::new(4096, 2).unwrap();
    let pool = BufPool::new(8192, 4).unwrap();
    r.register_pools(&[&other, &pool]).unwrap();
    assert!(pool.is_registered() && other.is_registered());
    write_read_round_trip(&mut r, &pool, f.as_raw_fd());
    drop(r);
    assert!(!pool.is_registered(), "registration ends with the ring");
}

/// Registered files: ops on the registered fd go out with IOSQE_FIXED_FILE (counted),
/// land the same bytes, ops on other fds are left alone; on epoll
/// there is no table.
#[test]
fn read_write_fsync_on_a_registered_file() {
    let t = TempPath::new("rfile");
    let f = t.create();
    let mut r = ring(Backend::Uring);
    let pool = BufPool::new(8192, 4).unwrap();
    r.register_pools(&[&pool]).unwrap();
    r.register_files(&[-1, f.as_raw_fd()]).unwrap();
    write_read_round_trip(&mut r, &pool, f.as_raw_fd());
    // Two writes, two reads, one sub-range read.
    assert_eq!(r.fixed_file_ops(), 5);
    r.push(
        Op::Fsync {
            fd: f.as_raw_fd(),
            datasync: true,
        },
        30,
    )
    .unwrap();
    assert_eq!(wait_one(&mut r).result, 0);
    assert_eq!(r.fixed_file_ops(), 6);
    // Another fd is not rewritten.
    let g = TempPath::new("rfile2");
    let gf = g.create();
    write_read_round_trip(&mut r, &pool, gf.as_raw_fd());
    assert_eq!(r.fixed_file_ops(), 6);
    let mut e = ring(Backend::Epoll);
    assert_eq!(
        e.register_files(&[f.as_raw_fd()]).unwrap_err().kind(),
        std::io::ErrorKind::Unsupported
    );
}

fn read_write_o_direct_registered_and_not(b: Backend) {
    for register in [false, true] {
        let t = TempPath::new("direct");
        let Some(f) = t.open_direct() else { return };
        let mut r = ring(b);
        let pool = BufPool::new(16384, 4).unwrap();
        if register {
            r.register_pools(&[&pool]).unwrap();
        }
        write_read_round_trip(&mut r, &pool, f.as_raw_fd());
        // Misaligned O_DIRECT write: the kernel says EINVAL, the Buf comes back.
        let b = pool.alloc().unwrap();
        r.push(
            Op::Write {
                fd: f.as_raw_fd(),
                buf: b,
                range: 1..4097,
                offset: 0,
            },
            99,
        )
        .unwrap();
        let c = wait_one(&mut r);
        assert_eq!(c.result, -22);
        assert!(c.buf.is_some());
    }
}

fn registered_pool_used_on_another_ring_falls_back(b: Backend) {
    let t = TempPath::new("other");
    let f = t.create();
    let mut r1 = ring(b);
    let mut r2 = ring(b);
    let pool = BufPool::new(8192, 4).unwrap();
    r1.register_pools(&[&pool]).unwrap();
    write_read_round_trip(&mut r2, &pool, f.as_raw_fd());
}

fn connect_send_recv_tcp(b: Backend) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let sock = rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::STREAM, None).unwrap();
    let fd = sock.as_raw_fd();
    let mut r = ring(b);
    r.push(Op::Connect { fd, addr }, 1).unwrap();
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (1, 0));
    let (mut peer, _) = l.accept().unwrap();

    let msg = b"GET / HTTP/1.1\r\n\r\n".to_vec();
    r.push(
        Op::Send {
            fd,
            data: msg.clone(),
            range: 4..msg.len(),
            flags: 0,
        },
        2,
    )
    .unwrap();
    let c = wait_one(&mut r);
    assert_eq!(c.result, (msg.len() - 4) as i32);
    assert_eq!(c.data.as_deref(), Some(&msg[..]));
    let mut got = vec![0; msg.len() - 4];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, &msg[4..]);

    let pool = BufPool::new(4096, 2).unwrap();
    r.push(
        Op::Recv {
            fd,
            buf: pool.alloc().unwrap(),
            range: 100..4096,
            flags: 0,
        },
        3,
    )
    .unwrap();
    r.submit().unwrap();
    peer.write_all(b"HTTP/1.1 200 OK\r\n").unwrap();
    let c = wait_one(&mut r);
    assert_eq!(c.result, 17);
    assert_eq!(&c.buf.unwrap()[100..117], b"HTTP/1.1 200 OK\r\n");

    // Connection refused comes back as -ECONNREFUSED.
    drop(l);
    let sock2 = rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::STREAM, None).unwrap();
    r.push(
        Op::Connect {
            fd: sock2.as_raw_fd(),
            addr,
        },
        4,
    )
    .unwrap();
    assert_eq!(wait_one(&mut r).result, -111);
}

fn recvmsg_scm_rights_on_unix_pair(backend: Backend) {
    let (a, b) = UnixStream::pair().unwrap();
    let t = TempPath::new("passed");
    let passed = t.create();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = rustix::net::SendAncillaryBuffer::new(&mut space);
    let fds = [passed.as_fd()];
    assert!(anc.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
    rustix::net::sendmsg(
        &a,
        &[std::io::IoSlice::new(b"hello")],
        &mut anc,
        rustix::net::SendFlags::empty(),
    )
    .unwrap();

    let mut r = ring(backend);
    let pool = BufPool::new(4096, 1).unwrap();
    let op = Op::RecvMsg {
        fd: b.as_raw_fd(),
        buf: pool.alloc().unwrap(),
        range: 0..64,
        control_len: 64,
        flags: 0,
    };
    r.push(op, 5).unwrap();
    let c = wait_one(&mut r);
    assert_eq!(c.result, 5);
    assert_eq!(&c.buf.as_ref().unwrap()[..5], b"hello");
    assert_eq!(c.msg_flags, 0);
    let control = c.control.unwrap();
    // struct cmsghdr { size_t len; int level; int type; } + one int fd.
    assert_eq!(control.len(), 16 + 4 + 4, "CMSG_SPACE(4)");
    let len = usize::from_ne_bytes(control[0..8].try_into().unwrap());
    let level = i32::from_ne_bytes(control[8..12].try_into().unwrap());
    let ty = i32::from_ne_bytes(control[12..16].try_into().unwrap());
    let fd = i32::from_ne_bytes(control[16..20].try_into().unwrap());
    assert_eq!((len, level, ty), (20, 1, 1), "SOL_SOCKET / SCM_RIGHTS");
    // SAFETY: SCM_RIGHTS installed `fd` in this process; we own it now.
    let got = unsafe { OwnedFd::from_raw_fd(fd) };
    let (m1, m2) = (rustix::fs::fstat(&got).unwrap(), rustix::fs::fstat(&passed).unwrap());
    assert_eq!((m1.st_dev, m1.st_ino), (m2.st_dev, m2.st_ino));

    // Control space too small for the cmsg: MSG_CTRUNC.
    rustix::net::sendmsg(
        &a,
        &[std::io::IoSlice::new(b"x")],
        &mut {
            let mut anc = rustix::net::SendAncillaryBuffer::new(&mut space);
            assert!(anc.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
            anc
        },
        rustix::net::SendFlags::empty(),
    )
    .unwrap();
    let op = Op::RecvMsg {
        fd: b.as_raw_fd(),
        buf: c.buf.unwrap(),
        range: 0..64,
        control_len: 8,
        flags: 0,
    };
    r.push(op, 6).unwrap();
    let c = wait_one(&mut r);
    assert_eq!(c.result, 1);
    assert_ne!(c.msg_flags & 8, 0, "MSG_CTRUNC");
}

fn recvmsg_on_tcp_has_empty_control(backend: Backend) {
    let (mut a, b) = tcp_pair();
    a.write_all(b"abc").unwrap();
    let mut r = ring(backend);
    let pool = BufPool::new(4096, 1).unwrap();
    let op = Op::RecvMsg {
        fd: b.as_raw_fd(),
        buf: pool.alloc().unwrap(),
        range: 0..4096,
        control_len: 64,
        flags: 0,
    };
    r.push(op, 1).unwrap();
    let c = wait_one(&mut r);
    assert_eq!(c.result, 3);
    assert_eq!(c.control.as_deref(), Some(&[][..]));
    assert_eq!(c.msg_flags, 0);
}

fn close_takes_the_fd(b: Backend) {
    let (rd, wr) = rustix::pipe::pipe().unwrap();
    let mut r = ring(b);
    r.push(Op::Close { fd: wr }, 1).unwrap();
    assert_eq!(wait_one(&mut r).result, 0);
    // The only write end is closed: the read end sees EOF.
    let mut buf = [0u8; 1];
    assert_eq!(rustix::io::read(&rd, &mut buf).unwrap(), 0);
}

fn fallocate_then_fstat(b: Backend) {
    let t = TempPath::new("falloc");
    let f = t.create();
    let mut r = ring(b);
    r.push(
        Op::Fallocate {
            fd: f.as_raw_fd(),
            mode: 0,
            offset: 4096,
            len: 1 << 20,
        },
        1,
    )
    .unwrap();
    let c = wait_one(&mut r);
    if c.result == -95 {
        eprintln!("skipping: fallocate not supported on /var/tmp");
        return;
    }
    assert_eq!(c.result, 0);
    assert_eq!(f.metadata().unwrap().len(), 4096 + (1 << 20));
}

fn fsync_and_datasync(b: Backend) {
    let t = TempPath::new("fsync");
    let mut f = t.create();
    f.write_all(b"data").unwrap();
    let mut r = ring(b);
    r.push(
        Op::Fsync {
            fd: f.as_raw_fd(),
            datasync: false,
        },
        1,
    )
    .unwrap();
    r.push(
        Op::Fsync {
            fd: f.as_raw_fd(),
            datasync: true,
        },
        2,
    )
    .unwrap();
    let mut res = [wait_one(&mut r), wait_one(&mut r)].map(|c| (c.tag, c.result));
    res.sort_unstable();
    assert_eq!(res, [(1, 0), (2, 0)]);
}

fn timeout_fires_with_etime(b: Backend) {
    let mut r = ring(b);
    let start = Instant::now();
    r.push(
        Op::Timeout {
            after: Duration::from_millis(50),
        },
        1,
    )
    .unwrap();
    let c = wait_one(&mut r);
    assert_eq!(c.result, -ETIME);
    assert!(start.elapsed() >= Duration::from_millis(45), "{:?}", start.elapsed());
}

fn link_timeout_cancels_idle_recv(b: Backend) {
    let (_peer, s) = tcp_pair();
    let mut r = ring(b);
    let pool = BufPool::new(4096, 1).unwrap();
    let start = Instant::now();
    let op = Op::Recv {
        fd: s.as_raw_fd(),
        buf: pool.alloc().unwrap(),
        range: 0..4096,
        flags: 0,
    };
    r.push_with_timeout(op, 9, Duration::from_millis(100)).unwrap();
    let c = wait_one(&mut r);
    let took = start.elapsed();
    assert_eq!((c.tag, c.result), (9, -ECANCELED));
    assert!(
        took >= Duration::from_millis(90) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert!(c.buf.is_some());
    assert_eq!(r.in_flight(), 0);
    // The timeout's own CQE is consumed inside the ring: nothing else comes out.
    r.submit_and_wait(1).unwrap();
    assert!(r.next_completion().is_none());

    // An op that finishes first is not affected by its timeout.
    r.push_with_timeout(Op::Nop, 10, Duration::from_secs(5)).unwrap();
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (10, 0));
    r.submit_and_wait(1).unwrap();
    assert!(r.next_completion().is_none());
}

fn cancel_pending_recv(b: Backend) {
    let (_peer, s) = tcp_pair();
    let mut r = ring(b);
    let pool = BufPool::new(4096, 1).unwrap();
    r.push(
        Op::Recv {
            fd: s.as_raw_fd(),
            buf: pool.alloc().unwrap(),
            range: 0..4096,
            flags: 0,
        },
        1,
    )
    .unwrap();
    r.submit().unwrap();
    r.push(Op::Cancel { target_tag: 1 }, 2).unwrap();
    let mut got = [wait_one(&mut r), wait_one(&mut r)];
    got.sort_by_key(|c| c.tag);
    assert_eq!((got[0].tag, got[0].result), (1, -ECANCELED));
    assert_eq!((got[1].tag, got[1].result), (2, 0));
    assert_eq!(pool.available(), 0, "Buf still held by the completion");
    drop(got);
    assert_eq!(pool.available(), 1);

    r.push(Op::Cancel { target_tag: 77 }, 3).unwrap();
    assert_eq!(wait_one(&mut r).result, -ENOENT);
}

/// A ring kept from one job to the next: `cancel_all` ends every op that waits (two
/// RECVs on idle sockets, one with a link timeout, a long TIMEOUT, a queued op not yet
/// submitted), each completes once with -ECANCELED and gives its buffer back, and the
/// ring then runs new ops as before.
fn cancel_all_ends_every_waiting_op(b: Backend) {
    let (_p1, s1) = tcp_pair();
    let (p2, s2) = tcp_pair();
    let mut r = ring(b);
    let pool = BufPool::new(4096, 3).unwrap();
    let recv = |fd: i32, buf| Op::Recv {
        fd,
        buf,
        range: 0..4096,
        flags: 0,
    };
    r.push(recv(s1.as_raw_fd(), pool.alloc().unwrap()), 1).unwrap();
    r.push_with_timeout(recv(s2.as_raw_fd(), pool.alloc().unwrap()), 2, Duration::from_secs(60))
        .unwrap();
    r.push(
        Op::Timeout {
            after: Duration::from_secs(60),
        },
        3,
    )
    .unwrap();
    r.submit().unwrap();
    // Pushed, never submitted.
    r.push(Op::Nop, 4).unwrap();
    let t0 = Instant::now();
    r.cancel_all().unwrap();
    let mut got: Vec<(u64, i32)> = (0..4).map(|_| wait_one(&mut r)).map(|c| (c.tag, c.result)).collect();
    got.sort_unstable();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    for (tag, res) in &got[..3] {
        assert_eq!(*res, -ECANCELED, "tag {tag}: {got:?}");
    }
    // The NOP was not started on epoll; io_uring may have run it before its cancel.
    assert!(got[3] == (4, -ECANCELED) || got[3] == (4, 0), "{got:?}");
    assert_eq!(r.in_flight(), 0);
    assert_eq!(pool.available(), 3, "every buffer given back");
    // The ring goes on: a new RECV gets the peer's bytes.
    (&p2).write_all(b"after").unwrap();
    r.push(recv(s2.as_raw_fd(), pool.alloc().unwrap()), 5).unwrap();
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (5, 5));
    assert_eq!(&c.buf.as_ref().unwrap()[..5], b"after");
}

/// Two tenants on one ring: `cancel_where` ends the ops of the one its predicate picks
/// (tag bit 8) and leaves the other's waiting.
fn cancel_where_ends_only_the_ops_it_picks(b: Backend) {
    let (p1, s1) = tcp_pair();
    let mut r = ring(b);
    let pool = BufPool::new(4096, 2).unwrap();
    let timeout = |tag| {
        (
            Op::Timeout {
                after: Duration::from_secs(60),
            },
            tag,
        )
    };
    let (op, tag) = timeout(0x100 | 1);
    r.push(op, tag).unwrap();
    r.push(
        Op::Recv {
            fd: s1.as_raw_fd(),
            buf: pool.alloc().unwrap(),
            range: 0..4096,
            flags: 0,
        },
        2,
    )
    .unwrap();
    let (op, tag) = timeout(3);
    r.push(op, tag).unwrap();
    r.submit().unwrap();
    // Pushed, never submitted, of the tenant cancelled.
    let (op, tag) = timeout(0x100 | 4);
    r.push(op, tag).unwrap();
    r.cancel_where(&|tag| tag & 0x100 != 0).unwrap();
    let mut got: Vec<(u64, i32)> = (0..2).map(|_| wait_one(&mut r)).map(|c| (c.tag, c.result)).collect();
    got.sort_unstable();
    assert_eq!(got, vec![(0x101, -ECANCELED), (0x104, -ECANCELED)]);
    assert_eq!(r.in_flight(), 2, "the other tenant's RECV and TIMEOUT still wait");
    // The RECV left alone still gets the peer's bytes.
    (&p1).write_all(b"still").unwrap();
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (2, 5));
    r.cancel_where(&|tag| tag == 3).unwrap();
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (3, -ECANCELED));
    assert_eq!(r.in_flight(), 0);
}

fn splice_socket_pipe_file(b: Backend) {
    let mut r = ring(b);
    if !r.probe().unwrap().supports(opcode::Splice::CODE) {
        eprintln!("skipping: IORING_OP_SPLICE not supported");
        return;
    }
    let (mut peer, s) = tcp_pair();
    let data = pattern(5, 300_000);
    let d2 = data.clone();
    let writer = std::thread::spawn(move || {
        peer.write_all(&d2).unwrap();
    });
    let (pr, pw) = rustix::pipe::pipe().unwrap();
    let t = TempPath::new("splice");
    let f = t.create();
    let mut off = 0u64;
    while off < data.len() as u64 {
        let op = Op::Splice {
            fd_in: s.as_raw_fd(),
            off_in: None,
            fd_out: pw.as_raw_fd(),
            off_out: None,
            len: 65536,
            flags: 0,
        };
        r.push(op, 1).unwrap();
        let n = wait_one(&mut r).result;
        assert!(n > 0, "socket→pipe: {n}");
        let mut left = n as u32;
        while left > 0 {
            let op = Op::Splice {
                fd_in: pr.as_raw_fd(),
                off_in: None,
                fd_out: f.as_raw_fd(),
                off_out: Some(off),
                len: left,
                flags: 0,
            };
            r.push(op, 2).unwrap();
            let m = wait_one(&mut r).result;
            assert!(m > 0, "pipe→file: {m}");
            left -= m as u32;
            off += m as u64;
        }
    }
    writer.join().unwrap();
    assert_eq!(std::fs::read(&t.0).unwrap(), data);
}

fn builder_fallback_keeps_a_working_ring(b: Backend) {
    let want = SetupFlags::SQPOLL | SetupFlags::SINGLE_ISSUER | SetupFlags::DEFER_TASKRUN;
    let mut r = RingBuilder::new(8)
        .backend(b)
        .sqpoll(10)
        .single_issuer(true)
        .defer_taskrun(true)
        .build()
        .unwrap();
    let g = r.granted();
    eprintln!("asked SQPOLL|SINGLE_ISSUER|DEFER_TASKRUN, granted {g:?}");
    let allowed = want | SetupFlags::TASKRUN_FLAG | SetupFlags::CLAMP;
    assert!(allowed.contains(g), "granted {g:?} not a subset");
    for i in 0..8 {
        r.push(Op::Nop, i).unwrap();
    }
    let mut tags: Vec<u64> = (0..8).map(|_| wait_one(&mut r).tag).collect();
    tags.sort_unstable();
    assert_eq!(tags, (0..8).collect::<Vec<_>>());
    let t = TempPath::new("fb");
    let f = t.create();
    let pool = BufPool::new(8192, 4).unwrap();
    write_read_round_trip(&mut r, &pool, f.as_raw_fd());
}

fn each_flag_alone(b: Backend) {
    for (name, builder, flag) in [
        ("sqpoll", RingBuilder::new(8).sqpoll(5), SetupFlags::SQPOLL),
        (
            "single_issuer",
            RingBuilder::new(8).single_issuer(true),
            SetupFlags::SINGLE_ISSUER,
        ),
        (
            "defer_taskrun",
            RingBuilder::new(8).defer_taskrun(true),
            SetupFlags::DEFER_TASKRUN,
        ),
        (
            "coop_taskrun",
            RingBuilder::new(8).coop_taskrun(true),
            SetupFlags::COOP_TASKRUN,
        ),
    ] {
        let mut r = builder.backend(b).build().unwrap();
        eprintln!("{name}: granted {:?}", r.granted());
        if !r.granted().contains(flag) {
            eprintln!("{name}: refused by this kernel, fell back");
        }
        let (_peer, s) = tcp_pair();
        let pool = BufPool::new(4096, 1).unwrap();
        r.push(
            Op::Timeout {
                after: Duration::from_millis(10),
            },
            1,
        )
        .unwrap();
        r.push_with_timeout(
            Op::Recv {
                fd: s.as_raw_fd(),
                buf: pool.alloc().unwrap(),
                range: 0..4096,
                flags: 0,
            },
            2,
            Duration::from_millis(20),
        )
        .unwrap();
        let mut got = [wait_one(&mut r), wait_one(&mut r)].map(|c| (c.tag, c.result));
        got.sort_unstable();
        assert_eq!(got, [(1, -ETIME), (2, -ECANCELED)], "{name}");
    }
}

fn cq_entries_setter(b: Backend) {
    let r = RingBuilder::new(4).backend(b).cq_entries(64).build().unwrap();
    assert_eq!(r.capacity(), 64);
    assert_eq!(r.sq_entries(), 4);
}

fn push_full_gives_the_op_back(b: Backend) {
    let mut r = RingBuilder::new(4).backend(b).build().unwrap();
    for i in 0..4 {
        r.push(Op::Nop, i).unwrap();
    }
    match r.push(Op::Nop, 4) {
        Err(PushError::Full { op: Op::Nop, tag: 4 }) => {}
        other => panic!("expected Full, got {other:?}"),
    }
    let (_rd, wr) = rustix::pipe::pipe().unwrap();
    let raw = wr.as_raw_fd();
    match r.push(Op::Close { fd: wr }, 5) {
        Err(PushError::Full {
            op: Op::Close { fd },
            tag: 5,
        }) => assert_eq!(fd.as_raw_fd(), raw),
        other => panic!("expected Full, got {other:?}"),
    }
    // Submitted but not reaped: SQ has room again, but the CQ budget (8) bounds in-flight ops.
    r.submit().unwrap();
    for i in 4..8 {
        r.push(Op::Nop, i).unwrap();
    }
    r.submit().unwrap();
    assert_eq!(r.in_flight(), 8);
    assert!(matches!(r.push(Op::Nop, 8), Err(PushError::Full { .. })));
    let mut n = 0;
    while n < 8 {
        wait_one(&mut r);
        n += 1;
    }
    assert_eq!(r.in_flight(), 0);
    // A linked pair needs two SQ entries.
    for i in 0..3 {
        r.push(Op::Nop, i).unwrap();
    }
    assert!(matches!(
        r.push_with_timeout(Op::Nop, 3, Duration::from_secs(1)),
        Err(PushError::Full { .. })
    ));
}

fn bad_range_gives_the_op_back(b: Backend) {
    let mut r = ring(b);
    let pool = BufPool::new(4096, 1).unwrap();
    let op = Op::Recv {
        fd: 0,
        buf: pool.alloc().unwrap(),
        range: 0..4097,
        flags: 0,
    };
    match r.push(op, 1) {
        Err(PushError::BadRange {
            op: Op::Recv { buf, .. },
            tag: 1,
        }) => drop(buf),
        other => panic!("expected BadRange, got {other:?}"),
    }
    let op = Op::Send {
        fd: 0,
        data: vec![1, 2, 3],
        range: 2..4,
        flags: 0,
    };
    assert!(matches!(r.push(op, 2), Err(PushError::BadRange { .. })));
    assert_eq!(pool.available(), 1);
    assert_eq!(r.in_flight(), 0);
}

fn drop_ring_with_recv_in_flight(b: Backend) {
    let (_peer, s) = tcp_pair();
    let pool = BufPool::new(4096, 4).unwrap();
    for submit in [true, false] {
        let mut r = ring(b);
        r.register_pools(&[&pool]).unwrap();
        for i in 0..3 {
            let op = Op::Recv {
                fd: s.as_raw_fd(),
                buf: pool.alloc().unwrap(),
                range: 0..4096,
                flags: 0,
            };
            r.push(op, i).unwrap();
        }
        r.push_with_timeout(
            Op::Recv {
                fd: s.as_raw_fd(),
                buf: pool.alloc().unwrap(),
                range: 0..4096,
                flags: 0,
            },
            3,
            Duration::from_secs(30),
        )
        .unwrap();
        if submit {
            r.submit().unwrap();
        }
        assert_eq!(pool.available(), 0);
        let start = Instant::now();
        drop(r);
        assert!(start.elapsed() < Duration::from_millis(900), "cancel confirmed quickly");
        assert_eq!(pool.available(), 4, "buffers returned after confirmed cancel");
        assert!(!pool.is_registered());
    }
}

#[test]
fn sqpoll_batch_if_granted() {
    let mut r = RingBuilder::new(16).sqpoll(2).build().unwrap();
    if !r.granted().contains(SetupFlags::SQPOLL) {
        eprintln!("skipping: SQPOLL refused");
        return;
    }
    // Let the poller go idle so NEED_WAKEUP is exercised.
    std::thread::sleep(Duration::from_millis(20));
    for round in 0..3 {
        for i in 0..16 {
            r.push(Op::Nop, i).unwrap();
        }
        let mut n = 0;
        while n < 16 {
            wait_one(&mut r);
            n += 1;
        }
        assert_eq!(r.in_flight(), 0, "round {round}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn register_failure_leaves_pools_usable(b: Backend) {
    // 32 MiB exceeds the usual unprivileged RLIMIT_MEMLOCK (8 MiB): as an
    // ordinary user registration fails with ENOMEM; as root it succeeds.
    let t = TempPath::new("memlock");
    let f = t.create();
    let mut r = ring(b);
    let big = BufPool::new(1 << 20, 32).unwrap();
    match r.register_pools(&[&big]) {
        // epoll: registration is a no-op that succeeds, pools stay plain.
        Ok(()) => assert_eq!(big.is_registered(), b == Backend::Uring),
        Err(e) => {
            eprintln!("registration refused ({e}); pools stay plain");
            assert!(!big.is_registered());
        }
    }
    write_read_round_trip(&mut r, &big, f.as_raw_fd());
}

/// The signalfd READ the download loop keeps in flight (offset `u64::MAX`:
/// the fd's position) completes when the signal arrives, not before.
fn signalfd_read_waits_for_the_signal(b: Backend) {
    unsafe extern "C" {
        fn pthread_kill(thread: usize, sig: i32) -> i32;
        fn pthread_self() -> usize;
    }
    // SIGUSR1 (10), blocked in this test's thread only (signal.rs' own test uses SIGUSR2).
    let sfd = uring::signal::block_signals(&[10]).unwrap();
    let mut r = ring(b);
    let pool = BufPool::new(4096, 1).unwrap();
    r.push(
        Op::Read {
            fd: sfd.as_raw_fd(),
            buf: pool.alloc().unwrap(),
            range: 0..uring::signal::SIGINFO_SIZE,
            offset: u64::MAX,
        },
        1,
    )
    .unwrap();
    r.push(
        Op::Timeout {
            after: Duration::from_millis(50),
        },
        2,
    )
    .unwrap();
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (2, -ETIME), "the READ waits: no signal yet");
    // SAFETY: pthread_kill(3) to this thread, which blocks SIGUSR1 (above), so the signal
    // stays pending for the signalfd instead of running the default action.
    assert_eq!(unsafe { pthread_kill(pthread_self(), 10) }, 0);
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (1, uring::signal::SIGINFO_SIZE as i32));
    assert_eq!(uring::signal::signo(&c.buf.unwrap()), Some(10));
}

/// A READ of a pipe at its position waits for a writer instead of blocking the thread.
fn pipe_read_waits_for_data(b: Backend) {
    let (rd, wr) = rustix::pipe::pipe().unwrap();
    let mut r = ring(b);
    let pool = BufPool::new(4096, 1).unwrap();
    r.push(
        Op::Read {
            fd: rd.as_raw_fd(),
            buf: pool.alloc().unwrap(),
            range: 0..4096,
            offset: u64::MAX,
        },
        1,
    )
    .unwrap();
    r.submit().unwrap();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        rustix::io::write(&wr, b"late").unwrap();
        wr
    });
    let c = wait_one(&mut r);
    assert_eq!(c.result, 4);
    assert_eq!(&c.buf.unwrap()[..4], b"late");
    drop(writer.join().unwrap());
}

/// socket → pipe SPLICE into a full pipe waits for room (data is ready on the
/// socket): the reader frees the pipe, then it moves the bytes.
fn splice_into_a_full_pipe_waits_for_room(b: Backend) {
    let mut r = ring(b);
    let (mut peer, s) = tcp_pair();
    let (pr, pw) = rustix::pipe::pipe().unwrap();
    let cap = rustix::pipe::fcntl_setpipe_size(&pw, 4096).unwrap();
    // Fill the pipe: its one page is taken.
    let fill = vec![7u8; cap];
    let mut n = 0;
    rustix::io::ioctl_fionbio(&pw, true).unwrap();
    while n < cap {
        match rustix::io::write(&pw, &fill[n..]) {
            Ok(k) => n += k,
            Err(rustix::io::Errno::AGAIN) => break,
            Err(e) => panic!("{e}"),
        }
    }
    rustix::io::ioctl_fionbio(&pw, false).unwrap();
    peer.write_all(b"spliced").unwrap();
    r.push(
        Op::Splice {
            fd_in: s.as_raw_fd(),
            off_in: None,
            fd_out: pw.as_raw_fd(),
            off_out: None,
            len: 7,
            flags: 0,
        },
        1,
    )
    .unwrap();
    r.push(
        Op::Timeout {
            after: Duration::from_millis(50),
        },
        2,
    )
    .unwrap();
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (2, -ETIME), "the SPLICE waits for room in the pipe");
    let mut got = vec![0u8; n];
    let mut k = 0;
    while k < n {
        k += rustix::io::read(&pr, &mut got[k..]).unwrap();
    }
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (1, 7));
    let mut out = [0u8; 7];
    assert_eq!(rustix::io::read(&pr, &mut out).unwrap(), 7);
    assert_eq!(&out, b"spliced");
}

/// An fd closed behind the ring's back (dropped, not [`Op::Close`]) whose number a new
/// socket takes: a RECV on the new socket still completes (epoll: the stale registration
/// is gone with the old file, so the ring registers the number again).
fn fd_number_reused_after_drop(b: Backend) {
    let mut r = ring(b);
    let pool = BufPool::new(4096, 1).unwrap();
    let (_p1, s1) = tcp_pair();
    let raw = s1.as_raw_fd();
    r.push(
        Op::Recv {
            fd: raw,
            buf: pool.alloc().unwrap(),
            range: 0..4096,
            flags: 0,
        },
        1,
    )
    .unwrap();
    r.submit().unwrap();
    r.push(Op::Cancel { target_tag: 1 }, 2).unwrap();
    let mut got = [wait_one(&mut r), wait_one(&mut r)];
    got.sort_by_key(|c| c.tag);
    assert_eq!(got.each_ref().map(|c| (c.tag, c.result)), [(1, -ECANCELED), (2, 0)]);
    drop(got);
    // A new socket takes s1's number: dup2(2) closes s1's file there and installs the new one
    // (exactly the number, whatever other test threads open meanwhile).
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let fresh = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut p2, _) = l.accept().unwrap();
    let mut s2 = OwnedFd::from(s1);
    rustix::io::dup2(&fresh, &mut s2).unwrap();
    drop(fresh);
    let raw2 = s2.as_raw_fd();
    assert_eq!(raw2, raw);
    r.push(
        Op::Recv {
            fd: raw2,
            buf: pool.alloc().unwrap(),
            range: 0..4096,
            flags: 0,
        },
        3,
    )
    .unwrap();
    r.submit().unwrap();
    p2.write_all(b"again").unwrap();
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (3, 5));
}

/// CLOSE of a socket through the ring, then a new socket on the same number: the new one's
/// CONNECT and RECV complete (epoll: CLOSE took the fd out of the epoll set first).
fn close_then_reuse_the_number(b: Backend) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let mut r = ring(b);
    let pool = BufPool::new(4096, 1).unwrap();
    let mut last = None;
    for round in 0..3u8 {
        let sock =
            rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::STREAM, None).unwrap();
        let raw = sock.as_raw_fd();
        if let Some(prev) = last
            && raw != prev
        {
            // Other test threads open fds too: the point is made only when the number comes back.
            eprintln!("fd {raw} instead of {prev}: another thread took the number");
        }
        last = Some(raw);
        r.push_with_timeout(Op::Connect { fd: raw, addr }, 1, Duration::from_secs(5))
            .unwrap();
        assert_eq!(wait_one(&mut r).result, 0);
        let (mut peer, _) = l.accept().unwrap();
        r.push(
            Op::Recv {
                fd: raw,
                buf: pool.alloc().unwrap(),
                range: 0..4096,
                flags: 0,
            },
            2,
        )
        .unwrap();
        r.submit().unwrap();
        peer.write_all(&[round]).unwrap();
        let c = wait_one(&mut r);
        assert_eq!((c.tag, c.result), (2, 1));
        assert_eq!(c.buf.unwrap()[0], round);
        r.push(Op::Close { fd: sock }, 3).unwrap();
        assert_eq!(wait_one(&mut r).result, 0);
    }
}

/// A CONNECT that cannot finish (a listener whose accept queue is full drops the SYN)
/// ends with -ECANCELED at its link timeout, as the download's connect timeout expects.
fn connect_link_timeout(b: Backend) {
    // backlog 0 still admits one connection; fill it, then the next SYN is dropped.
    let l = rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::STREAM, None).unwrap();
    rustix::net::bind(&l, &"127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap()).unwrap();
    rustix::net::listen(&l, 0).unwrap();
    let addr = match rustix::net::getsockname(&l).unwrap().try_into() {
        Ok(std::net::SocketAddr::V4(a)) => std::net::SocketAddr::V4(a),
        _ => panic!("not v4"),
    };
    let mut keep = Vec::new();
    let mut r = ring(b);
    let start = Instant::now();
    loop {
        let sock =
            rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::STREAM, None).unwrap();
        r.push_with_timeout(
            Op::Connect {
                fd: sock.as_raw_fd(),
                addr,
            },
            1,
            Duration::from_millis(200),
        )
        .unwrap();
        let c = wait_one(&mut r);
        keep.push(sock);
        if c.result == -ECANCELED {
            break;
        }
        assert_eq!(c.result, 0, "connect");
        assert!(
            keep.len() < 64 && start.elapsed() < Duration::from_secs(10),
            "the SYN queue never filled"
        );
    }
}

/// Sixteen writes pushed at once, then dropped or reaped: all land exactly. On epoll the
/// file ops run on worker threads (named `ringdl-file-N`, checked in /proc): several
/// are in flight together, and dropping the ring waits for them (the blocks they write
/// from must not be freed under them).
fn many_file_writes_in_flight(b: Backend, drop_early: bool) {
    let t = TempPath::new("many-writes");
    let f = t.create();
    let fd = f.as_raw_fd();
    let bs = 64 * 1024;
    let pool = BufPool::new(bs, 16).unwrap();
    let mut r = RingBuilder::new(64).backend(b).build().unwrap();
    for i in 0..16u64 {
        let mut blk = pool.alloc().unwrap();
        blk.copy_from_slice(&pattern(i as u8, bs));
        r.push(
            Op::Write {
                fd,
                buf: blk,
                range: 0..bs,
                offset: i * bs as u64,
            },
            i,
        )
        .unwrap();
    }
    r.submit().unwrap();
    if b == Backend::Epoll {
        // A thread names itself once it runs (std sets the name from inside it): on a
        // loaded machine the first look can see it still under the spawner's name.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let names: Vec<String> = std::fs::read_dir("/proc/self/task")
                .unwrap()
                .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
                .collect();
            if names.iter().any(|n| n.starts_with("ringdl-file-")) {
                break;
            }
            assert!(std::time::Instant::now() < until, "no file worker thread: {names:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    if drop_early {
        drop(r);
    } else {
        let mut seen = [false; 16];
        for _ in 0..16 {
            let c = wait_one(&mut r);
            assert_eq!(c.result, bs as i32, "write {}", c.tag);
            assert!(c.buf.is_some());
            seen[c.tag as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(r.in_flight(), 0);
    }
    let mut all = Vec::new();
    File::open(&t.0).unwrap().read_to_end(&mut all).unwrap();
    assert_eq!(all.len(), 16 * bs);
    for (i, chunk) in all.chunks(bs).enumerate() {
        assert!(chunk == &pattern(i as u8, bs)[..], "block {i}");
    }
}

#[test]
fn epoll_file_writes_run_on_workers_and_all_land() {
    many_file_writes_in_flight(Backend::Epoll, false);
    many_file_writes_in_flight(Backend::Uring, false);
}

#[test]
fn epoll_dropping_the_ring_waits_for_the_writes_on_workers() {
    many_file_writes_in_flight(Backend::Epoll, true);
}

/// Runs each named test body on both backends.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod on_uring {
            $(#[test]
            fn $name() {
                super::$name(uring::Backend::Uring)
            })*
        }
        mod on_epoll {
            $(#[test]
            fn $name() {
                super::$name(uring::Backend::Epoll)
            })*
        }
    };
}

on_both!(
    nop,
    probe_supports_read_fixed,
    read_write_buffered_unregistered,
    read_write_o_direct_registered_and_not,
    registered_pool_used_on_another_ring_falls_back,
    connect_send_recv_tcp,
    recvmsg_scm_rights_on_unix_pair,
    recvmsg_on_tcp_has_empty_control,
    close_takes_the_fd,
    fallocate_then_fstat,
    fsync_and_datasync,
    timeout_fires_with_etime,
    link_timeout_cancels_idle_recv,
    cancel_pending_recv,
    cancel_all_ends_every_waiting_op,
    cancel_where_ends_only_the_ops_it_picks,
    splice_socket_pipe_file,
    builder_fallback_keeps_a_working_ring,
    each_flag_alone,
    cq_entries_setter,
    push_full_gives_the_op_back,
    bad_range_gives_the_op_back,
    drop_ring_with_recv_in_flight,
    register_failure_leaves_pools_usable,
    signalfd_read_waits_for_the_signal,
    pipe_read_waits_for_data,
    splice_into_a_full_pipe_waits_for_room,
    fd_number_reused_after_drop,
    close_then_reuse_the_number,
    connect_link_timeout
);
