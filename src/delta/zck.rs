//! zchunk (`zchunk_format.txt`): the lead, the header and its index, the chunker, chunks decoded.
