//! Engine `splice`: the pipe → file SPLICE that drains each connection's pipe.

use crate::engine::place::Delimiter;
use crate::err;
use crate::error::Result;
use crate::event::*;
use crate::tag::Tag;
use uring::Op;

/// SPLICE_F_MOVE (splice(2)): move pages instead of copying when the kernel can.
pub(crate) const SPLICE_F_MOVE: u32 = 1;

impl Loop<'_> {
    /// Engine splice: SPLICE pipe → file at the held bytes' offset once the pipe holds
    /// `--write-threshold` bytes, is full, or holds the end of the response.
    pub(crate) fn drain(&mut self, i: usize) -> Result<()> {
        let c = &mut self.conns[i];
        let body_done =
            c.rx.job
                .as_ref()
                .is_none_or(|j| matches!(j.placer.delimiter(), Some(Delimiter::Length(0))));
        let Some(pipe) = c.pipe.as_mut() else { return Ok(()) };
        if pipe.draining || pipe.held == 0 {
            return Ok(());
        }
        // A pipe fills by slots (pages), not bytes: spliced socket data may use a page per
        // MSS-sized fragment, so wait for at most an eighth of the byte capacity, or a socket
        // SPLICE could block on a pipe that is "full" while we wait for the threshold.
        let threshold = self.sh.opts.write_threshold.min(pipe.cap / 8);
        if pipe.held < threshold && pipe.room() > 0 && !body_done && !c.eof {
            return Ok(());
        }
        pipe.draining = true;
        let op = Op::Splice {
            fd_in: pipe.rd(),
            off_in: None,
            fd_out: self.out_fd,
            off_out: Some(pipe.file_pos),
            len: pipe.held.min(u32::MAX as usize) as u32,
            flags: SPLICE_F_MOVE,
        };
        self.push(op, Tag::Drain(i).encode())
    }

    pub(crate) fn drain_completion(&mut self, i: usize, res: i32) -> Result<()> {
        let pipe = self.conns[i].pipe.as_mut().expect("drain of a pipe");
        pipe.draining = false;
        if res <= 0 {
            let at = pipe.file_pos;
            let e = if res == 0 {
                "nothing written".to_owned()
            } else {
                errno(res).to_string()
            };
            self.sh.fatal = Some(err!(LocalIo, "splice to {} at offset {at}: {e}", self.sh.tr.out_name));
            return Ok(());
        }
        let n = res as usize;
        self.sh.tr.landed.add(pipe.file_pos, pipe.file_pos + n as u64);
        pipe.file_pos += n as u64;
        pipe.held -= n;
        self.drain(i)?;
        self.after(i, Ok(()))
    }
}
