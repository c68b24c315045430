//! The same output on another descriptor (dup(2)), for another reactor (`--threads`): a
//! part of its transfer, or a whole file of a list placed there.

use super::Output;
use crate::err;
use crate::error::Result;

impl Output {
    /// The same regular file for another reactor's part of the transfer (`--threads`): a
    /// duplicate of the descriptor (same open file description: O_DIRECT and alignment as
    /// this one), with no `.part` of its own to truncate, sync or rename — the owner does
    /// that — and named in messages as this one. `None` for an output that is not a
    /// regular file (standard output, a FIFO, a block device's room: one reactor writes
    /// it).
    ///
    /// # Errors
    /// `LocalIo` when dup(2) fails (EMFILE).
    pub fn part_of(&self) -> Result<Option<Output>> {
        if (self.part.is_none() && !self.of_part) || self.room.is_some() || self.sequential {
            return Ok(None);
        }
        Ok(Some(Output {
            part: None,
            final_path: None,
            force: false,
            what: Some(self.describe()),
            of_part: true,
            ..self.dup()?
        }))
    }

    /// The same output on another descriptor (dup(2)), for a whole transfer another
    /// reactor runs (`--threads`, a list's file): `None` for an output that is not a
    /// regular file.
    ///
    /// # Errors
    /// `LocalIo` when dup(2) fails (EMFILE).
    pub fn duplicate(&self) -> Result<Option<Output>> {
        if self.part.is_none() || self.room.is_some() || self.sequential {
            return Ok(None);
        }
        self.dup().map(Some)
    }

    /// This output on a new descriptor of the same open file (dup(2)): a regular file's
    /// (no block device's room).
    fn dup(&self) -> Result<Output> {
        let fd = self
            .fd
            .try_clone()
            .map_err(|e| err!(LocalIo, "{}: dup: {e}", self.describe()))?;
        Ok(Output {
            fd,
            direct: self.direct,
            align: self.align,
            sequential: false,
            part: self.part.clone(),
            final_path: self.final_path.clone(),
            force: self.force,
            what: self.what.clone(),
            room: None,
            of_part: self.of_part,
            id: self.id,
            reads: self.reads,
            opened: self.opened,
            // (The same file: what any duplicate writes counts for all.)
            grown: std::sync::Arc::clone(&self.grown),
        })
    }
}
