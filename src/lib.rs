//! ringdl's engines as a library: the byte-moving state the event loop of the `ringdl`
//! binary drives (write blocks, the compaction copy, body framing, splice pipes). It is a
//! library so that `fuzz/` and the corpus replay (`tests/fuzz_corpus.rs`) run the very
//! code that places body bytes at file offsets.

#![forbid(unsafe_code)]

pub mod engine;
