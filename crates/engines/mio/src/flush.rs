//! One-piece flushing (MioDB §4.2, P2 in `FORMAT.md`): the immutable MemTable's arena is
//! copied to ONE pmem allocation in arena order, its links rebased in the same pass
//! (`table::write_table`, through a small buffer rather than a DRAM copy of the arena),
//! persisted, then published in L0 with one atomic root update in
//! the same directory that retires its log; only then do readers switch from the DRAM copy
//! to the PMTable, and the log's run is freed.
//!
//! Thread safety: run by the flush thread (and by recovery before the threads start).

use std::sync::Arc;
use std::time::Instant;

use tierkv_core::Result;

use crate::store::Inner;
use crate::table::{self, Table};
use crate::version::MemTable;

impl Inner {
    /// Flushes the immutable MemTable if there is one; returns whether it did.
    pub fn flush_step(&self) -> Result<bool> {
        let Some(imm) = self.version().imm.clone() else {
            return Ok(false);
        };
        self.flush_memtable(&imm, true)?;
        self.notify();
        Ok(true)
    }

    /// Writes `mem` as a PMTable, publishes it in L0 and retires its log (P2 steps 1-5).
    /// `installed`: `mem` is the version's immutable MemTable (false at recovery).
    pub fn flush_memtable(&self, mem: &Arc<MemTable>, installed: bool) -> Result<()> {
        let started = Instant::now();
        // Puts that took their room before the MemTable became immutable may still be
        // linking their nodes (`arena.rs`): the image is taken once they are all in.
        mem.arena.wait_for_fills();
        // A writer whose log record failed gave its node's room up unwritten, after
        // poisoning the store: such an image is never taken.
        self.check_writable()?;
        let t = if mem.arena.entries() == 0 {
            None
        } else {
            let id = self.take_id();
            let len = mem.arena.used() as u64;
            let place = table::Placement {
                target: mem.target,
                cost: self.sizes.cost_of(&mem.arena, 0)?,
            };
            let t = table::write_table(
                &self.shared,
                &mem.arena,
                id,
                mem.arena.max_seq(),
                self.shape,
                place,
            )?;
            self.shared.counters.flush_bytes.add(len);
            self.shared.pool.crash_point("mio.flush.after_copy");
            Some(Arc::new(t))
        };
        self.publish_flush(mem, t, installed)?;
        self.shared
            .flush_awaited
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self.shared.pool.crash_point("mio.flush.after_publish");
        self.shared.pool.crash_point("mio.flush.before_log_free");
        // P2 step 5: the log is no longer listed; free its run. An empty MemTable's flush
        // target was not used: free it too.
        self.shared.alloc.free_chunk(mem.log.run.off)?;
        if mem.arena.entries() == 0
            && let Some(r) = mem.target
        {
            self.shared.alloc.free_chunk(r.off)?;
        }
        let c = &self.shared.counters;
        c.flushes.incr();
        c.flush_micros.add(started.elapsed().as_micros() as u64);
        Ok(())
    }

    fn publish_flush(
        &self,
        mem: &Arc<MemTable>,
        t: Option<Arc<Table>>,
        installed: bool,
    ) -> Result<()> {
        let mut st = self.dir.lock();
        let mut d = st.cur.clone();
        d.logs.retain(|l| l.id != mem.log.id);
        if let Some(t) = &t {
            d.next_id = d.next_id.max(t.meta.id + 1);
            d.last_seq = d.last_seq.max(t.meta.max_seq);
            if let Some(l0) = d.levels.first_mut() {
                l0.push(t.meta.clone());
            }
        }
        self.publish(&mut st, d)?;
        let mut v = self.version.write();
        let mut nv = (**v).clone();
        if let (Some(t), Some(l0)) = (t, nv.levels.first_mut()) {
            l0.push(t);
        }
        if installed {
            nv.imm = None;
            self.imm_pending
                .store(false, std::sync::atomic::Ordering::Release);
        }
        *v = Arc::new(nv);
        Ok(())
    }
}
