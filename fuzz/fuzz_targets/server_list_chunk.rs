//! Fuzz target: the list-chunk decoder of `tierkv serve` (`tierkv_server::list_chunk`),
//! which reads whatever bytes a store holds under a chunk key. Any bytes must parse or be
//! refused, never panic; a chunk that parses is canonical (rebuilt slot by slot it gives
//! the same bytes); and edits of a parsed chunk keep it parseable.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_server::list_chunk::{Chunk, ChunkRef, Entry, SLOTS};

fuzz_target!(|data: &[u8]| {
    // The first byte says how many trailing bytes are edits to apply after parsing.
    let Some((&edits, rest)) = data.split_first() else {
        return;
    };
    let cut = rest.len().saturating_sub(usize::from(edits % 16) * 2);
    let (stored, ops) = rest.split_at(cut);
    let Ok(view) = ChunkRef::parse(stored) else {
        assert!(Chunk::from_stored(stored.to_vec()).is_err());
        return;
    };
    let mut rebuilt = Chunk::new();
    let mut count = 0;
    for (slot, e) in view.entries_from(0) {
        assert!(slot >= view.first() && slot < view.end());
        if e != Entry::Hole {
            rebuilt.set(slot, e);
        }
        count += 1;
    }
    assert_eq!(count, view.end() - view.first());
    assert_eq!(rebuilt.bytes(), stored);
    let mut chunk = Chunk::from_stored(stored.to_vec()).expect("parsed above");
    for op in ops.chunks_exact(2) {
        let slot = usize::from(op[0]) % SLOTS as usize;
        let value = [op[1]; 3];
        match op[1] % 3 {
            0 => chunk.set(slot, Entry::Hole),
            1 => chunk.set(slot, Entry::External),
            _ => chunk.set(slot, Entry::Inline(&value[..usize::from(op[1] % 4)])),
        }
        if !chunk.is_empty() {
            let again = Chunk::from_stored(chunk.bytes().to_vec()).expect("an edit stays canonical");
            assert_eq!(again, chunk);
        }
    }
});
