//! Unit tests of the placer: framing, compaction, the ciphertext target, corpus replay.

use super::*;

fn collect(queue: &mut VecDeque<WriteBlock>, file: &mut [u8], base: u64) {
    while let Some(mut wb) = queue.pop_front() {
        let buf = wb.buf.take().unwrap();
        let at = (wb.off - base) as usize;
        file[at..at + wb.fill].copy_from_slice(&buf[..wb.fill]);
    }
}

#[test]
fn length_body_lands_in_order_through_a_one_block_pool() {
    let pool = BufPool::new(4096, 1).unwrap();
    let mut queue = VecDeque::new();
    let body: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    let base = 1 << 33; // past 4 GiB
    let mut p = Placer::new(base, base + body.len() as u64);
    p.begin(Delimiter::Length(body.len() as u64), base + body.len() as u64);
    let mut file = vec![0u8; body.len()];
    let mut fed = p
        .feed(
            &body,
            &mut Blocks {
                pool: &pool,
                queue: &mut queue,
            },
        )
        .unwrap();
    while fed == Fed::Blocked {
        collect(&mut queue, &mut file, base);
        fed = p
            .retry_spill(&mut Blocks {
                pool: &pool,
                queue: &mut queue,
            })
            .unwrap();
    }
    assert_eq!(fed, Fed::Done);
    assert_eq!(p.release(None, &mut queue), base + body.len() as u64);
    collect(&mut queue, &mut file, base);
    assert_eq!(file, body);
}

#[test]
fn short_response_keeps_only_the_aligned_part() {
    let pool = BufPool::new(8192, 2).unwrap();
    let mut queue = VecDeque::new();
    let mut p = Placer::new(4096, 4096 + 100_000);
    p.begin(Delimiter::Length(100_000), 4096 + 100_000);
    let fed = p
        .feed(
            &[1; 5000],
            &mut Blocks {
                pool: &pool,
                queue: &mut queue,
            },
        )
        .unwrap();
    assert_eq!(fed, Fed::More);
    assert_eq!(p.release(Some(4096), &mut queue), 8192);
    assert_eq!(queue.len(), 1);
    assert_eq!((queue[0].off, queue[0].fill), (4096, 4096));
}

#[test]
fn chunked_206_past_its_range_is_refused_before_a_byte_lands() {
    let pool = BufPool::new(4096, 2).unwrap();
    let mut queue = VecDeque::new();
    let mut p = Placer::new(0, 4);
    p.begin(Delimiter::Chunked(ChunkedDecoder::new()), 4);
    let r = p.feed(
        b"5\r\nabcde\r\n0\r\n\r\n",
        &mut Blocks {
            pool: &pool,
            queue: &mut queue,
        },
    );
    assert_eq!(r, Err(PlaceError::PastRange { end: 4 }));
    assert_eq!(p.pos(), 0);
}

#[test]
fn chunked_200_learns_its_end_and_flags_trailing_bytes() {
    let pool = BufPool::new(4096, 2).unwrap();
    let mut queue = VecDeque::new();
    let mut p = Placer::new(0, u64::MAX);
    p.begin(Delimiter::Chunked(ChunkedDecoder::new()), u64::MAX);
    let r = p.feed(
        b"3\r\nabc\r\n0\r\n\r\nHTTP",
        &mut Blocks {
            pool: &pool,
            queue: &mut queue,
        },
    );
    assert_eq!(r, Ok(Fed::Done));
    assert_eq!(p.end(), 3);
    assert!(p.overrun());
}

#[test]
fn recv_target_never_asks_past_the_body() {
    let pool = BufPool::new(4096, 2).unwrap();
    let mut queue = VecDeque::new();
    let mut p = Placer::new(0, 100);
    p.begin(Delimiter::Length(100), 100);
    let mut blocks = Blocks {
        pool: &pool,
        queue: &mut queue,
    };
    let (mut buf, range) = p.recv_target(&mut blocks).unwrap();
    assert_eq!(range, 0..100);
    buf[..60].fill(9);
    p.recv_done(buf, 60);
    assert_eq!(p.settle(&mut blocks), Ok(Fed::More));
    let (_, range) = p.recv_target(&mut blocks).unwrap();
    assert_eq!(range, 60..100);
}

#[test]
fn shrink_stops_the_body_at_the_split_point_even_with_a_recv_in_flight() {
    let pool = BufPool::new(65536, 2).unwrap();
    let mut queue = VecDeque::new();
    let mut p = Placer::new(0, 100_000);
    p.begin(Delimiter::Length(100_000), 100_000);
    let mut blocks = Blocks {
        pool: &pool,
        queue: &mut queue,
    };
    assert_eq!(p.feed(&[7; 1000], &mut blocks), Ok(Fed::More));
    let (buf, range) = p.recv_target(&mut blocks).unwrap();
    assert_eq!(range, 1000..65536);
    // Stolen while the RECV is in flight: the RECV brings bytes past the split.
    assert!(!p.shrink(1000), "nothing left before the split");
    assert!(!p.shrink(100_000), "split at the end");
    assert!(p.shrink(4096));
    assert_eq!((p.end(), p.remaining()), (4096, 3096));
    p.recv_done(buf, 10_000);
    assert_eq!(p.pos(), 4096);
    assert_eq!(p.settle(&mut blocks), Ok(Fed::Done));
    assert!(p.overrun(), "the rest of the response is not read: no reuse");
    assert_eq!(p.release(Some(4096), &mut queue), 4096);
    assert_eq!((queue[0].off, queue[0].fill), (0, 4096));
}

#[test]
fn a_206_fits_only_when_it_starts_at_pos_and_ends_inside() {
    assert!(content_range_fits(4096, 8191, 4096, 8192), "exactly the range asked");
    assert!(content_range_fits(4096, 4096, 4096, 8192), "one byte");
    assert!(!content_range_fits(4096, 8192, 4096, 8192), "one byte past the end");
    assert!(!content_range_fits(0, 4095, 4096, 8192), "starts before pos");
    assert!(
        !content_range_fits(8192, 8193, 4096, 8192),
        "starts past pos, ends past"
    );
    assert!(!content_range_fits(4097, 8191, 4096, 8192), "starts past pos");
}

#[test]
fn place_errors_say_what_is_wrong() {
    assert_eq!(
        PlaceError::PastRange { end: 4 }.to_string(),
        "chunked body longer than its Content-Range"
    );
    assert_eq!(
        PlaceError::ShortChunked { at: 3, end: 10 }.to_string(),
        "chunked body ends at byte 3, Content-Range said 10"
    );
    assert_eq!(PlaceError::NoProgress.to_string(), "chunked decoder made no progress");
    let e = ChunkedDecoder::new().step(b"x\r\n").unwrap_err();
    assert_eq!(PlaceError::Chunked(e).to_string(), format!("bad chunked body: {e}"));
}

#[test]
fn an_empty_pool_holds_input_in_order_and_says_how_much() {
    let pool = BufPool::new(4096, 1).unwrap();
    let mut queue = VecDeque::new();
    let mut p = Placer::new(8192, 8192 + 10_000);
    assert!(p.delimiter().is_none() && p.block().is_none());
    p.begin(Delimiter::Length(10_000), 8192 + 10_000);
    assert!(matches!(p.delimiter(), Some(Delimiter::Length(10_000))));
    let mut blocks = Blocks {
        pool: &pool,
        queue: &mut queue,
    };
    assert_eq!(p.feed(&[1; 100], &mut blocks), Ok(Fed::More));
    assert_eq!(p.block(), Some((8192, 100)));
    assert!(!p.has_spill() && p.spill_len() == 0);
    // 3996 bytes fill the block; the pool's one block is out: 1004 wait.
    assert_eq!(p.feed(&[2; 5000], &mut blocks), Ok(Fed::Blocked));
    assert!(p.has_spill());
    assert_eq!(p.spill_len(), 1004);
    // The full block went to the write queue when the next one was asked for.
    assert_eq!(p.block(), None);
    assert_eq!(blocks.queue.len(), 1);
    assert_eq!((blocks.queue[0].off, blocks.queue[0].fill), (8192, 4096));
    // Input behind held input is held too.
    assert_eq!(p.feed(&[3; 7], &mut blocks), Ok(Fed::Blocked));
    assert_eq!(p.spill_len(), 1011);
    assert_eq!(p.retry_spill(&mut blocks), Ok(Fed::Blocked), "still no free block");
    assert_eq!(p.spill_len(), 1011);
    drop(blocks.queue.pop_front()); // written: its buffer goes back to the pool
    assert_eq!(p.retry_spill(&mut blocks), Ok(Fed::More));
    assert!(!p.has_spill() && p.spill_len() == 0);
    assert_eq!(p.block(), Some((8192 + 4096, 1011)));
    assert_eq!(p.pos(), 8192 + 5107);
    assert!(!p.overrun());
}

#[test]
fn a_close_delimited_body_takes_every_byte() {
    let pool = BufPool::new(4096, 4).unwrap();
    let mut queue = VecDeque::new();
    let mut p = Placer::new(0, u64::MAX);
    p.begin(Delimiter::Close, u64::MAX);
    let body: Vec<u8> = (0..9000u32).map(|i| (i * 13) as u8).collect();
    let mut blocks = Blocks {
        pool: &pool,
        queue: &mut queue,
    };
    assert_eq!(p.feed(&body[..10], &mut blocks), Ok(Fed::More));
    assert_eq!(p.feed(&body[10..], &mut blocks), Ok(Fed::More));
    assert_eq!(p.pos(), 9000);
    assert!(!p.has_spill() && !p.overrun());
    assert_eq!(p.release(None, &mut queue), 9000);
    let mut file = vec![0u8; body.len()];
    collect(&mut queue, &mut file, 0);
    assert_eq!(file, body);
}

#[test]
fn a_chunked_206_that_ends_early_is_short_and_one_that_fills_its_range_is_done() {
    let pool = BufPool::new(4096, 2).unwrap();
    let mut queue = VecDeque::new();
    let mut blocks = Blocks {
        pool: &pool,
        queue: &mut queue,
    };
    // Not at 0: the room left is `end - pos`, not `end`.
    let mut p = Placer::new(4096, 4096 + 10);
    p.begin(Delimiter::Chunked(ChunkedDecoder::new()), 4096 + 10);
    assert_eq!(
        p.feed(b"5\r\nabcde\r\n0\r\n\r\n", &mut blocks),
        Err(PlaceError::ShortChunked {
            at: 4096 + 5,
            end: 4096 + 10
        })
    );
    p.release(None, blocks.queue);
    blocks.queue.clear();
    // Exactly to the end, and nothing after the last chunk: no overrun.
    let mut p = Placer::new(4096, 4096 + 5);
    p.begin(Delimiter::Chunked(ChunkedDecoder::new()), 4096 + 5);
    assert_eq!(p.feed(b"5\r\nabcde\r\n0\r\n\r\n", &mut blocks), Ok(Fed::Done));
    assert_eq!((p.pos(), p.end()), (4096 + 5, 4096 + 5));
    assert!(!p.overrun());
    p.release(None, blocks.queue);
    blocks.queue.clear();
    // One byte past a range that does not start at 0.
    let mut p = Placer::new(4096, 4096 + 4);
    p.begin(Delimiter::Chunked(ChunkedDecoder::new()), 4096 + 4);
    assert_eq!(
        p.feed(b"5\r\nabcde\r\n0\r\n\r\n", &mut blocks),
        Err(PlaceError::PastRange { end: 4096 + 4 })
    );
}

#[test]
fn a_recv_that_brought_nothing_leaves_nothing_to_write() {
    let pool = BufPool::new(4096, 2).unwrap();
    let mut queue = VecDeque::new();
    let mut p = Placer::new(0, 100);
    p.begin(Delimiter::Length(100), 100);
    let mut blocks = Blocks {
        pool: &pool,
        queue: &mut queue,
    };
    let (buf, _) = p.recv_target(&mut blocks).unwrap();
    p.recv_done(buf, 0);
    assert_eq!(p.block(), Some((0, 0)));
    assert_eq!(p.release(Some(4096), &mut queue), 0);
    assert!(queue.is_empty(), "an empty block was queued for a write");
    // A RECV within the body is no overrun.
    let mut p = Placer::new(0, 100);
    p.begin(Delimiter::Length(100), 100);
    let mut blocks = Blocks {
        pool: &pool,
        queue: &mut queue,
    };
    let (buf, range) = p.recv_target(&mut blocks).unwrap();
    p.recv_done(buf, range.len());
    assert_eq!(p.settle(&mut blocks), Ok(Fed::Done));
    assert!(!p.overrun());
}

/// The `compaction` fuzz target's properties over its committed corpus: every byte at
/// its offset through random record sizes, read splits and pool sizes.
#[test]
fn the_compaction_corpus_keeps_its_properties() {
    crate::replay_corpus("compaction", crate::fuzz_props::compaction);
}

#[test]
fn only_a_length_body_shrinks() {
    let mut p = Placer::new(0, u64::MAX);
    p.begin(Delimiter::Chunked(ChunkedDecoder::new()), u64::MAX);
    assert!(!p.shrink(4096));
    let mut p = Placer::new(0, 8192);
    assert!(!p.shrink(4096), "no framing yet");
}

#[test]
fn cipher_target_and_landed_keep_the_block_in_file_order() {
    let pool = BufPool::new(4096, 2).unwrap();
    let mut queue = VecDeque::new();
    let mut p = Placer::new(0, 5000);
    p.begin(Delimiter::Length(5000), 5000);
    let mut blocks = Blocks {
        pool: &pool,
        queue: &mut queue,
    };
    // Nothing waits: the RECV starts at the fill and may use the whole block.
    let (buf, range) = p.cipher_target(&mut blocks, None).unwrap();
    assert_eq!(range, 0..4096);
    p.cipher_returned(buf);
    let (block, fill) = p.block_mut().unwrap();
    assert_eq!(fill, 0);
    block[..3].copy_from_slice(b"abc"); // a record opened in place
    assert_eq!(p.landed(3), 3);
    assert_eq!((p.pos(), p.block()), (3, Some((0, 3))));
    // Ciphertext waits at 40..: the next RECV goes after it, not at the fill.
    let (buf, range) = p.cipher_target(&mut blocks, Some(40)).unwrap();
    assert_eq!(range, 40..4096);
    p.cipher_returned(buf);
    assert_eq!(p.landed(4093), 4093);
    assert_eq!(p.settle(&mut blocks), Ok(Fed::More));
    assert_eq!(blocks.queue.len(), 1, "the full block is queued");
    // More content than the body owes: kept up to its end, the rest flags overrun.
    let (buf, _) = p.cipher_target(&mut blocks, None).unwrap();
    p.cipher_returned(buf);
    assert_eq!(p.landed(1000), 904);
    assert!(p.overrun() && p.is_done());
}

#[test]
fn discard_drops_the_held_block_and_blocks_carry_their_source() {
    let pool = BufPool::new(4096, 2).unwrap();
    let mut queue = VecDeque::new();
    let mut p = Placer::new(8192, 8192 + 20_000).with_source(3);
    p.begin(Delimiter::Length(20_000), 8192 + 20_000);
    let mut blocks = Blocks {
        pool: &pool,
        queue: &mut queue,
    };
    // The first block fills and is queued; the second holds 1904 bytes.
    assert_eq!(p.feed(&[7; 6000], &mut blocks).unwrap(), Fed::More);
    assert_eq!(queue.len(), 1);
    assert_eq!((queue[0].off, queue[0].fill, queue[0].source), (8192, 4096, 3));
    assert_eq!(p.block(), Some((12288, 1904)));
    assert_eq!(pool.available(), 0);
    // Not a byte of the held block is queued; its buffer goes back to the pool.
    assert_eq!(p.discard(), 12288);
    assert_eq!(p.block(), None);
    assert_eq!(queue.len(), 1);
    assert_eq!(pool.available(), 1);
}
