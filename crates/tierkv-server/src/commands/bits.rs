//! Bit commands over strings: SETBIT, GETBIT, BITCOUNT (Redis 7.0's replies and errors).
//!
//! A string is a bit array, bit 0 the most significant bit of byte 0 (Redis's order).
//! SETBIT past the end grows the string with zero bytes, up to the store's value limit
//! (Redis's own bound is 2^32 bits; past the store's limit the reply is the string-size
//! error, a documented difference). A missing key reads as an empty string.
//!
//! Thread-safety: handlers run concurrently on worker threads under the key locks.

use super::strings::check_string_len;
use super::{CmdError, CmdResult, Ctx, as_string, is, msg, parse_i64_strict};
use crate::encoding;
use crate::resp::Args;

/// Redis's bound on a bit offset: the bytes it addresses must fit 512 MiB.
const MAX_BIT_OFFSET: i64 = (512 << 20) * 8 - 1;

/// A bit offset argument, or Redis's error for it.
fn bit_offset(arg: &[u8]) -> Result<u64, CmdError> {
    parse_i64_strict(arg)
        .filter(|o| (0..=MAX_BIT_OFFSET).contains(o))
        .map(|o| o as u64)
        .ok_or_else(|| CmdError::new("ERR bit offset is not an integer or out of range"))
}

/// The byte of bit `offset` and the mask of the bit in it.
fn locate(offset: u64) -> (usize, u8) {
    ((offset >> 3) as usize, 0x80 >> (offset & 7))
}

/// SETBIT key offset value
pub(crate) fn setbit(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let offset = bit_offset(args.get(2))?;
    let on = match parse_i64_strict(args.get(3)) {
        Some(0) => false,
        Some(1) => true,
        _ => {
            return Err(CmdError::new("ERR bit is not an integer or out of range"));
        }
    };
    let (mut s, deadline) = match ctx.load_entry(key)? {
        Some((v, deadline)) => (as_string(&v)?.to_vec(), deadline),
        None => (Vec::new(), None),
    };
    let (byte, mask) = locate(offset);
    if s.len() <= byte {
        // Refused before anything is allocated when the bytes alone pass the limit.
        check_string_len(ctx, byte + 1)?;
        s.resize(byte + 1, 0);
        check_string_len(ctx, encoding::encoded_string_len(&s))?;
    }
    let old = s.get(byte).is_some_and(|b| b & mask != 0);
    if let Some(b) = s.get_mut(byte) {
        if on {
            *b |= mask;
        } else {
            *b &= !mask;
        }
    }
    ctx.store_with_deadline(key, &encoding::encode_string(&s), deadline)?;
    ctx.out.int(i64::from(old));
    Ok(())
}

/// GETBIT key offset
pub(crate) fn getbit(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let offset = bit_offset(args.get(2))?;
    let bit = match ctx.load(args.get(1))? {
        Some(v) => {
            let (byte, mask) = locate(offset);
            as_string(&v)?.get(byte).is_some_and(|b| b & mask != 0)
        }
        None => false,
    };
    ctx.out.int(i64::from(bit));
    Ok(())
}

/// The set bits of `s` in Redis's BITCOUNT range `start..=end` (bytes, or bits with
/// `bits`; negative indexes count from the end).
fn count(s: &[u8], start: i64, end: i64, bits: bool) -> i64 {
    let mut total = i64::try_from(s.len()).unwrap_or(i64::MAX);
    if start < 0 && end < 0 && start > end {
        return 0;
    }
    if bits {
        total = total.saturating_mul(8);
    }
    let fix = |i: i64| if i < 0 { (total + i).max(0) } else { i };
    let (start, end) = (fix(start), fix(end).min(total - 1));
    if start > end {
        return 0;
    }
    if !bits {
        let range = s.get(start as usize..=end as usize).unwrap_or_default();
        return range.iter().map(|b| i64::from(b.count_ones())).sum();
    }
    // Whole bytes, less the bits of the edge bytes outside the range.
    let (first, last) = ((start >> 3) as usize, (end >> 3) as usize);
    let ones = |b: u8| i64::from(b.count_ones());
    let whole: i64 = s
        .get(first..=last)
        .unwrap_or_default()
        .iter()
        .map(|&b| ones(b))
        .sum();
    let before = !(0xFF_u8 >> (start & 7)); // bits of `first` before `start`
    let after = 0xFF_u8.checked_shr((end & 7) as u32 + 1).unwrap_or(0); // after `end`
    let edge = |i: usize, m: u8| s.get(i).map_or(0, |&b| ones(b & m));
    whole - edge(first, before) - edge(last, after)
}

/// BITCOUNT key [start end [BYTE|BIT]]
pub(crate) fn bitcount(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    // As Redis: a missing key counts 0 before the other arguments are looked at.
    let Some(v) = ctx.load(args.get(1))? else {
        ctx.out.int(0);
        return Ok(());
    };
    let s = as_string(&v)?;
    let n = match args.len() {
        2 => s.iter().map(|b| i64::from(b.count_ones())).sum(),
        4 | 5 => {
            let start = super::parse_int(args.get(2))?;
            let end = super::parse_int(args.get(3))?;
            if start < 0 && end < 0 && start > end {
                0
            } else {
                let bits = if args.len() == 5 {
                    let unit = args.get(4);
                    if is(unit, "BIT") {
                        true
                    } else if is(unit, "BYTE") {
                        false
                    } else {
                        return Err(CmdError::new(msg::SYNTAX));
                    }
                } else {
                    false
                };
                count(s, start, end, bits)
            }
        }
        _ => return Err(CmdError::new(msg::SYNTAX)),
    };
    ctx.out.int(n);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_numbered_from_the_most_significant() {
        assert_eq!(locate(0), (0, 0x80));
        assert_eq!(locate(7), (0, 0x01));
        assert_eq!(locate(8), (1, 0x80));
    }

    #[test]
    fn counts_follow_redis_ranges() {
        // "foobar": 4 6 6 3 4 4 set bits per byte (Redis's documentation example).
        let s = b"foobar";
        assert_eq!(count(s, 0, -1, false), 26);
        assert_eq!(count(s, 0, 0, false), 4);
        assert_eq!(count(s, 1, 1, false), 6);
        assert_eq!(count(s, 1, 1, true), 1);
        assert_eq!(count(s, 5, 30, true), 17);
        assert_eq!(count(s, -2, -1, false), 7);
        assert_eq!(count(s, -1, -2, false), 0);
        assert_eq!(count(s, 10, 20, false), 0);
        assert_eq!(count(s, -100, 100, false), 26);
        assert_eq!(count(b"", 0, -1, false), 0);
    }

    #[test]
    fn offsets_beyond_redis_bound_are_refused() {
        assert!(bit_offset(b"4294967295").is_ok());
        assert!(bit_offset(b"4294967296").is_err());
        assert!(bit_offset(b"-1").is_err());
        assert!(bit_offset(b"x").is_err());
    }
}
