//! The cache-line write-back and store-fence instructions behind `persist` in
//! [`DurabilityMode::Dax`](crate::api::options::DurabilityMode::Dax) (DESIGN §4).
//!
//! On x86-64 a store reaches the persistence domain (ADR: the memory controller's queues)
//! once its cache line is written back and the write-back is ordered by a fence. The best
//! available instruction is chosen once per process with `cpuid`:
//! `clwb` (writes back, keeps the line cached) > `clflushopt` (writes back and evicts,
//! weakly ordered) > `clflush` (writes back and evicts, strongly ordered, slow). Whatever
//! the instruction, `sfence` follows the last write-back of a `persist` call, so every
//! store before `persist` is durable when it returns.
//!
//! Other architectures have no implementation: [`FlushInstr::detect`] returns `None` and
//! the pool refuses Dax mode there with [`Error::Unsupported`](crate::Error::Unsupported).
//!
//! Thread safety: the instructions touch no Rust-visible state; any thread may call them.
//! `unsafe` here: inline assembly, whose only requirement is a mapped address.

use std::sync::OnceLock;

/// The size of a cache line, the unit of write-back and of crash images.
pub const LINE: usize = 64;

/// A cache-line write-back instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushInstr {
    /// `clwb`: write back, keep the line cached.
    Clwb,
    /// `clflushopt`: write back and evict, weakly ordered.
    Clflushopt,
    /// `clflush`: write back and evict, ordered with other stores.
    Clflush,
}

impl FlushInstr {
    /// The best write-back instruction this CPU has, detected once; `None` where there is
    /// none we can use.
    pub fn detect() -> Option<FlushInstr> {
        static DETECTED: OnceLock<Option<FlushInstr>> = OnceLock::new();
        *DETECTED.get_or_init(cpu::detect)
    }

    /// The mnemonic, for reports.
    pub fn name(self) -> &'static str {
        match self {
            FlushInstr::Clwb => "clwb",
            FlushInstr::Clflushopt => "clflushopt",
            FlushInstr::Clflush => "clflush",
        }
    }

    /// Writes back the cache line holding `addr`.
    ///
    /// # Safety
    /// `addr` must point into memory mapped in this process for the duration of the call
    /// (a write-back of an unmapped address faults).
    #[inline]
    #[expect(unsafe_code, reason = "cache-line write-back needs a mapped address")]
    pub unsafe fn write_back(self, addr: *const u8) {
        // SAFETY: forwarded from this function's contract.
        unsafe { cpu::write_back(self, addr) }
    }
}

/// Orders every earlier store and write-back before every later store (`sfence`).
#[inline]
pub fn store_fence() {
    cpu::store_fence();
}

#[cfg(target_arch = "x86_64")]
mod cpu {
    use super::FlushInstr;
    use std::arch::asm;
    use std::arch::x86_64::{__cpuid, __cpuid_count};

    const LEAF1_EDX_CLFLUSH: u32 = 1 << 19;
    const LEAF7_EBX_CLFLUSHOPT: u32 = 1 << 23;
    const LEAF7_EBX_CLWB: u32 = 1 << 24;

    #[expect(unsafe_code, reason = "cpuid")]
    #[allow(
        unused_unsafe,
        reason = "__cpuid/__cpuid_count are unsafe fns before Rust 1.95 (our MSRV is 1.89) and safe from 1.95"
    )]
    pub(super) fn detect() -> Option<FlushInstr> {
        // SAFETY: cpuid exists on every x86-64 CPU; leaf 7 is read only when leaf 0 says
        // it exists. The instruction only reads CPU identification registers.
        let (max_leaf, leaf1_edx, leaf7_ebx) = unsafe {
            let max_leaf = __cpuid(0).eax;
            let leaf7_ebx = if max_leaf >= 7 {
                __cpuid_count(7, 0).ebx
            } else {
                0
            };
            (max_leaf, __cpuid(1).edx, leaf7_ebx)
        };
        debug_assert!(max_leaf >= 1, "every x86-64 CPU has cpuid leaf 1");
        if leaf7_ebx & LEAF7_EBX_CLWB != 0 {
            return Some(FlushInstr::Clwb);
        }
        if leaf7_ebx & LEAF7_EBX_CLFLUSHOPT != 0 {
            return Some(FlushInstr::Clflushopt);
        }
        (leaf1_edx & LEAF1_EDX_CLFLUSH != 0).then_some(FlushInstr::Clflush)
    }

    /// # Safety
    /// `addr` is mapped for the duration of the call, and `instr` is supported by this
    /// CPU (it came from `detect`).
    #[inline]
    #[expect(
        unsafe_code,
        reason = "inline assembly for clwb / clflushopt / clflush"
    )]
    pub(super) unsafe fn write_back(instr: FlushInstr, addr: *const u8) {
        // SAFETY: the caller guarantees `addr` is mapped and the instruction exists on this
        // CPU; a write-back changes no memory contents, only where the line lives. No
        // `nomem` option: the asm acts as a compiler barrier, so earlier stores are emitted
        // before the write-back.
        unsafe {
            match instr {
                FlushInstr::Clwb => {
                    asm!("clwb [{0}]", in(reg) addr, options(nostack, preserves_flags))
                }
                FlushInstr::Clflushopt => {
                    asm!("clflushopt [{0}]", in(reg) addr, options(nostack, preserves_flags));
                }
                FlushInstr::Clflush => {
                    asm!("clflush [{0}]", in(reg) addr, options(nostack, preserves_flags))
                }
            }
        }
    }

    #[inline]
    #[expect(unsafe_code, reason = "inline assembly for sfence")]
    pub(super) fn store_fence() {
        // SAFETY: `sfence` exists on every x86-64 CPU (SSE is baseline) and only orders
        // memory operations.
        unsafe { asm!("sfence", options(nostack, preserves_flags)) }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod cpu {
    use super::FlushInstr;

    pub(super) fn detect() -> Option<FlushInstr> {
        None
    }

    /// # Safety
    /// Never called: `detect` returns `None`, so no `FlushInstr` reaches a pool.
    #[expect(unsafe_code, reason = "same signature as the x86-64 version")]
    pub(super) unsafe fn write_back(_instr: FlushInstr, _addr: *const u8) {}

    pub(super) fn store_fence() {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn every_x86_64_cpu_has_at_least_clflush() {
        assert!(FlushInstr::detect().is_some());
    }

    #[test]
    fn write_back_of_ordinary_memory_keeps_its_contents() {
        let Some(instr) = FlushInstr::detect() else {
            return;
        };
        let buf: Vec<u8> = (0..4 * LINE).map(|i| i as u8).collect();
        for line in buf.chunks(LINE) {
            // SAFETY: `line` points into `buf`, which is alive and mapped.
            #[expect(unsafe_code, reason = "test of the write-back instruction")]
            unsafe {
                instr.write_back(line.as_ptr())
            };
        }
        store_fence();
        assert!(buf.iter().enumerate().all(|(i, b)| *b == i as u8));
        assert!(!instr.name().is_empty());
    }
}
