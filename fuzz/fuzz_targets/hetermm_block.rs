//! Fuzz target: HeterMM's full-block decoders (`format::block`: header, bitmap, the
//! page-by-page record walk) return an error, never a panic or an out-of-bounds read or a
//! hang, on any bytes: raw input as a header, and the input laid out as the records of a
//! 16 KiB block with a valid header (k = 12, m = 14).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_hetermm::format::block::{BlockHeader, is_marked, prefix_len, walk};

const BITS: u32 = 14;

fuzz_target!(|data: &[u8]| {
    let _ = BlockHeader::decode(data, 0, 5, BITS);
    let header = BlockHeader { page_bits: 12, block_bits: BITS as u8, block_no: 5 };
    let mut block = vec![0u8; 1 << BITS];
    block[..64].copy_from_slice(&header.encode());
    let start = prefix_len(BITS) as usize;
    let n = data.len().min(block.len() - start);
    block[start..start + n].copy_from_slice(&data[..n]);
    let decoded = BlockHeader::decode(&block, 0, 5, BITS).expect("valid header");
    let mut offs = Vec::new();
    let _ = walk(&block, 0, &decoded, |f| {
        assert!(f.off as usize + f.bytes.len() <= block.len());
        offs.push(f.off);
    });
    for w in offs.windows(2) {
        assert!(w[0] < w[1], "the walk went backwards");
    }
    for off in offs {
        let _ = is_marked(&block, off);
    }
});
