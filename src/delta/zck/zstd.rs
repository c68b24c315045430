//! A chunk's zstd frame decoded (ruzstd), with the file's dictionary when it has one, and
//! never to more bytes than the index declares (`src/lib/comp/zstd/zstd.c`: each chunk is
//! one frame made by `ZSTD_compress2`, the dictionary chunk one frame made without it).

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, Dictionary, FrameDecoder};
use ruzstd::io::Read as _;

/// A zstd dictionary's first four bytes (RFC 8878 §5); a dictionary without them is raw
/// content, as `ZSTD_CCtx_loadDictionary` takes it.
const DICT_MAGIC: [u8; 4] = [0x37, 0xa4, 0x30, 0xec];
/// The ID a raw-content dictionary is filed under in the decoder (frames made with one
/// name none, so it is forced on each frame).
const RAW_DICT_ID: u32 = 0x7a63_6b31;

/// The dictionary as the decoder takes it: its ID, for [`FrameDecoder::force_dict`].
pub fn load_dict(decoder: &mut FrameDecoder, dict: &[u8]) -> Result<u32, String> {
    let d = if dict.len() >= 8 && dict[..4] == DICT_MAGIC {
        Dictionary::decode_dict(dict).map_err(|e| format!("the zstd dictionary does not decode: {e}"))?
    } else {
        Dictionary {
            id: RAW_DICT_ID,
            fse: Default::default(),
            huf: Default::default(),
            dict_content: dict.to_vec(),
            // RFC 8878 §3.1.2.5: the repeat offsets a frame starts with.
            offset_hist: [1, 4, 8],
        }
    };
    let id = d.id;
    decoder.add_dict(d).map_err(|e| format!("the zstd dictionary: {e}"))?;
    Ok(id)
}

/// Decodes the frames in `src` into `out` (appended), with dictionary `dict` (an ID given
/// to `decoder` by [`load_dict`]) when given; at most `max` bytes: more is an error, and
/// the decoder refuses windows larger than `max` rounded up to a power of two (1 MiB at
/// least), so a lying frame allocates no more than that.
pub fn decode(
    decoder: &mut FrameDecoder,
    dict: Option<u32>,
    mut src: &[u8],
    max: u64,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    decoder.set_max_window_size(max.max(1 << 20).next_power_of_two());
    let limit = out.len() as u64 + max;
    while !src.is_empty() {
        match decoder.init(&mut src) {
            Ok(()) => {}
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame { length, .. })) => {
                src = usize::try_from(length)
                    .ok()
                    .and_then(|n| src.get(n..))
                    .ok_or("a skippable zstd frame runs past the chunk's end")?;
                continue;
            }
            Err(e) => return Err(format!("zstd: {e}")),
        }
        if let Some(id) = dict {
            decoder.force_dict(id).map_err(|e| format!("zstd: {e}"))?;
        }
        loop {
            decoder
                .decode_blocks(&mut src, BlockDecodingStrategy::UptoBlocks(1))
                .map_err(|e| format!("zstd: {e}"))?;
            let ready = decoder.can_collect();
            if out.len() as u64 + ready as u64 > limit {
                return Err(format!("zstd: the chunk decodes to more than its {max} bytes"));
            }
            let at = out.len();
            out.resize(at + ready, 0);
            let n = decoder.read(&mut out[at..]).map_err(|e| format!("zstd: {e}"))?;
            out.truncate(at + n);
            if decoder.is_finished() && decoder.can_collect() == 0 {
                break;
            }
        }
    }
    Ok(())
}
