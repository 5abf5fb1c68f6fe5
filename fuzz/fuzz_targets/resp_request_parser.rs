//! Fuzz target: the RESP request parser of `tierkv serve` (`tierkv_server::resp::parser`),
//! which reads bytes straight from the network. Any stream, cut into reads of any size,
//! must give commands, refused commands (an over-long argument, skipped) or a protocol
//! error: never a panic, never an argument outside the batch's bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv_server::resp::{Batch, ParserLimits, RequestParser};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the read size and whether the client has authenticated.
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(first >> 1).max(1);
    let limits = ParserLimits {
        max_bulk_len: 4096,
        max_args: 64,
        max_request_bytes: 16 << 10,
        max_commands: 8,
    };
    let mut parser = RequestParser::new(limits, first & 1 == 0);
    let mut buf = bytes::BytesMut::new();
    let mut batch = Batch::default();
    let mut fed = 0;
    for piece in stream.chunks(chunk) {
        buf.extend_from_slice(piece);
        fed += piece.len();
        loop {
            if parser.parse(&buf).is_err() {
                return;
            }
            if parser.complete_commands() == 0 {
                break;
            }
            parser.take_batch(&mut buf, &mut batch);
            // Arguments are slices of what was received (unquoting only shrinks them).
            let mut used = 0;
            for i in 0..batch.len() {
                let args = batch.command(i).expect("a counted command is there");
                assert!(!args.is_empty());
                if batch.refused(i) {
                    // An over-long argument: one argument, the error to answer.
                    assert_eq!(args.len(), 1);
                    assert!(args.get(0).starts_with(b"ERR argument of "));
                    continue;
                }
                used += args.iter_from(0).map(<[u8]>::len).sum::<usize>();
            }
            assert!(used <= fed);
        }
        // What the connection does before reading more: drop a refused command's bytes.
        parser.discard_refused(&mut buf);
    }
});
