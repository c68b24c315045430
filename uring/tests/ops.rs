//! Every op against the real kernel, through the safe owned-buffer layer.

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

use uring::{BufPool, Completion, Op, PushError, Ring, RingBuilder, SetupFlags, opcode};

const ETIME: i32 = 62;
const ECANCELED: i32 = 125;
const ENOENT: i32 = 2;

fn ring() -> Ring {
    RingBuilder::new(32).build().expect("io_uring_setup")
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

#[test]
fn nop() {
    let mut r = ring();
    r.push(Op::Nop, 7).unwrap();
    assert_eq!(r.in_flight(), 1);
    let c = wait_one(&mut r);
    assert_eq!((c.tag, c.result), (7, 0));
    assert!(c.buf.is_none() && c.data.is_none() && c.control.is_none());
    assert_eq!(r.in_flight(), 0);
}

#[test]
fn probe_supports_read_fixed() {
    let p = ring().probe().unwrap();
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

#[test]
fn read_write_buffered_unregistered() {
    let t = TempPath::new("rw");
    let f = t.create();
    let mut r = ring();
    let pool = BufPool::new(8192, 4).unwrap();
    assert!(!pool.is_registered());
    write_read_round_trip(&mut r, &pool, f.as_raw_fd());
}

#[test]
fn read_write_fixed_registered_buffered() {
    let t = TempPath::new("rwf");
    let f = t.create();
    let mut r = ring();
    let other = BufPool::new(4096, 2).unwrap();
    let pool = BufPool::new(8192, 4).unwrap();
    r.register_pools(&[&other, &pool]).unwrap();
    assert!(pool.is_registered() && other.is_registered());
    write_read_round_trip(&mut r, &pool, f.as_raw_fd());
    drop(r);
    assert!(!pool.is_registered(), "registration ends with the ring");
}

#[test]
fn read_write_o_direct_registered_and_not() {
    for register in [false, true] {
        let t = TempPath::new("direct");
        let Some(f) = t.open_direct() else { return };
        let mut r = ring();
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

#[test]
fn registered_pool_used_on_another_ring_falls_back() {
    let t = TempPath::new("other");
    let f = t.create();
    let mut r1 = ring();
    let mut r2 = ring();
    let pool = BufPool::new(8192, 4).unwrap();
    r1.register_pools(&[&pool]).unwrap();
    write_read_round_trip(&mut r2, &pool, f.as_raw_fd());
}

#[test]
fn connect_send_recv_tcp() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let sock = rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::STREAM, None).unwrap();
    let fd = sock.as_raw_fd();
    let mut r = ring();
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

#[test]
fn recvmsg_scm_rights_on_unix_pair() {
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

    let mut r = ring();
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

#[test]
fn recvmsg_on_tcp_has_empty_control() {
    let (mut a, b) = tcp_pair();
    a.write_all(b"abc").unwrap();
    let mut r = ring();
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

#[test]
fn close_takes_the_fd() {
    let (rd, wr) = rustix::pipe::pipe().unwrap();
    let mut r = ring();
    r.push(Op::Close { fd: wr }, 1).unwrap();
    assert_eq!(wait_one(&mut r).result, 0);
    // The only write end is closed: the read end sees EOF.
    let mut buf = [0u8; 1];
    assert_eq!(rustix::io::read(&rd, &mut buf).unwrap(), 0);
}

#[test]
fn fallocate_then_fstat() {
    let t = TempPath::new("falloc");
    let f = t.create();
    let mut r = ring();
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

#[test]
fn fsync_and_datasync() {
    let t = TempPath::new("fsync");
    let mut f = t.create();
    f.write_all(b"data").unwrap();
    let mut r = ring();
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

#[test]
fn timeout_fires_with_etime() {
    let mut r = ring();
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

#[test]
fn link_timeout_cancels_idle_recv() {
    let (_peer, s) = tcp_pair();
    let mut r = ring();
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

#[test]
fn cancel_pending_recv() {
    let (_peer, s) = tcp_pair();
    let mut r = ring();
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

#[test]
fn splice_socket_pipe_file() {
    let mut r = ring();
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

#[test]
fn builder_fallback_keeps_a_working_ring() {
    let want = SetupFlags::SQPOLL | SetupFlags::SINGLE_ISSUER | SetupFlags::DEFER_TASKRUN;
    let mut r = RingBuilder::new(8)
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

#[test]
fn each_flag_alone() {
    for (name, b, flag) in [
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
        let mut r = b.build().unwrap();
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

#[test]
fn cq_entries_setter() {
    let r = RingBuilder::new(4).cq_entries(64).build().unwrap();
    assert_eq!(r.capacity(), 64);
    assert_eq!(r.sq_entries(), 4);
}

#[test]
fn push_full_gives_the_op_back() {
    let mut r = RingBuilder::new(4).build().unwrap();
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

#[test]
fn bad_range_gives_the_op_back() {
    let mut r = ring();
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

#[test]
fn drop_ring_with_recv_in_flight() {
    let (_peer, s) = tcp_pair();
    let pool = BufPool::new(4096, 4).unwrap();
    for submit in [true, false] {
        let mut r = ring();
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

#[test]
fn register_failure_leaves_pools_usable() {
    // 32 MiB exceeds the usual unprivileged RLIMIT_MEMLOCK (8 MiB): as an
    // ordinary user registration fails with ENOMEM; as root it succeeds.
    let t = TempPath::new("memlock");
    let f = t.create();
    let mut r = ring();
    let big = BufPool::new(1 << 20, 32).unwrap();
    match r.register_pools(&[&big]) {
        Ok(()) => assert!(big.is_registered()),
        Err(e) => {
            eprintln!("registration refused ({e}); pools stay plain");
            assert!(!big.is_registered());
        }
    }
    write_read_round_trip(&mut r, &big, f.as_raw_fd());
}
