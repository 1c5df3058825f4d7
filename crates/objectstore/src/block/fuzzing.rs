//! Entry points for the fuzzers (`fuzz/`, target `blockstore_decode`): the
//! decoders of what the block store reads back from its disk — journal
//! record payloads, object records, deferred-write records, collection ids
//! and object keys — on bytes a damaged disk could hold. Each must answer an error, never panic or
//! allocate without bound. Not an API.

/// Decodes `bytes` as the record kind `which` picks; the result is dropped.
pub fn decode(which: u8, bytes: &[u8]) {
    match which % 4 {
        0 => {
            let _ = super::journal::decode_payload(bytes);
        }
        1 => {
            if let Ok(r) = super::codec::ObjectRecord::decode(bytes) {
                // What the store checks before it trusts a record.
                let _ = r.check(1 << 20);
            }
        }
        2 => {
            let _ = super::codec::decode_deferred(bytes);
        }
        _ => {
            let _ = crate::CollectionId::from_bytes(bytes);
            let _ = crate::ObjectKey::from_bytes(bytes);
            let _ = crate::ObjectKey::from_bytes_prefix(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    /// The inputs kept in the fuzzer's corpus (`fuzz/corpus/blockstore_decode`; the
    /// crashes it found among them, once fixed) that reach this crate run
    /// here too.
    #[test]
    fn the_fuzz_corpus_runs_clean() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/blockstore_decode");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let input = std::fs::read(e.path()).unwrap_or_default();
            let Some((&which, bytes)) = input.split_first() else {
                continue;
            };
            super::decode(which, bytes);
            n += 1;
        }
        assert!(n > 0, "no corpus for this crate in {}", dir.display());
    }
}
