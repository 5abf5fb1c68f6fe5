//! Checksums for everything tierkv writes: CRC-32C (Castagnoli), hardware-accelerated where
//! the CPU has it. Stored little-endian, *masked* as LevelDB masks them, so that a CRC of a
//! buffer that itself holds CRCs does not degenerate.

/// The CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Extends `crc` (a CRC-32C of earlier bytes) with `data`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

const MASK_DELTA: u32 = 0xa282_ead8;

/// The masked form of a CRC, as stored on media.
#[inline]
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The CRC behind a masked value.
#[inline]
pub fn unmask(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

/// The masked CRC-32C of `data`, ready to store.
#[inline]
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask(crc32c(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn mask_round_trips_and_differs() {
        for c in [0, 1, 0xdead_beef, u32::MAX] {
            assert_eq!(unmask(mask(c)), c);
            assert_ne!(mask(c), c);
        }
        assert_eq!(
            crc32c_append(crc32c(b"1234"), b"56789"),
            crc32c(b"123456789")
        );
    }
}
