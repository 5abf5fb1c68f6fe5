//! Software prefetch: a hint that memory will be read soon, so that the loads of many
//! independent reads (the values of a scan, each at a random place in DRAM or pmem) overlap
//! instead of waiting for one cache miss after another.
//!
//! A prefetch reads nothing architecturally: it cannot fault, changes no value, and is not
//! counted as a read of any tier. On targets without a prefetch instruction it does
//! nothing.
//!
//! Thread safety: pure hints, callable from any thread.

/// Cache-line size the hints are issued at.
const LINE: usize = 64;

/// Hints that the cache lines holding `bytes` will be read soon.
#[inline]
pub fn prefetch_bytes(bytes: &[u8]) {
    let mut at = 0;
    while at < bytes.len() {
        prefetch_line(bytes[at..].as_ptr());
        at += LINE;
    }
    if let Some(last) = bytes.last() {
        prefetch_line(last);
    }
}

/// Hints that the cache line holding `r` will be read soon.
#[inline]
pub fn prefetch<T>(r: &T) {
    prefetch_line((r as *const T).cast());
}

#[inline]
#[allow(unsafe_code)]
fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint: it never faults, not even on an invalid address, and
    // has no architectural effect; SSE is part of the x86_64 baseline. `p` comes from a
    // live reference anyway.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_leave_memory_unchanged() {
        let v: Vec<u8> = (0..=255).collect();
        prefetch_bytes(&v);
        prefetch_bytes(&v[..0]);
        prefetch_bytes(&v[200..201]);
        prefetch(&v[17]);
        assert!(v.iter().enumerate().all(|(i, b)| *b as usize == i));
    }
}
