//! Entry points for the fuzzers (`fuzz/`, target `osd_decode`): the
//! decoders of what an OSD reads back from its store — PG log entries,
//! dups, PG info, missing sets, snapshot sets, object metadata, scrub
//! records, trimmed-snapshot runs — on bytes a damaged store could hold.
//! Each must answer an error (or a default), never panic. Not an API.

/// Decodes `bytes` as the record kind `which` picks; the result is dropped.
pub fn decode(which: u8, bytes: &[u8]) {
    match which % 8 {
        0 => {
            let _ = crate::log::LogEntry::decode(bytes);
        }
        1 => {
            let _ = crate::log::Dup::decode(bytes);
        }
        2 => {
            let _ = crate::log::PgInfoData::decode(bytes);
        }
        3 => {
            // A missing set is stored as records; split the input in four.
            let q = bytes.len() / 4;
            let records: Vec<Vec<u8>> = bytes.chunks(q.max(1)).map(<[u8]>::to_vec).collect();
            let _ = crate::missing::MissingSet::decode(&records);
        }
        4 => {
            let _ = crate::object::SnapSet::decode(bytes);
        }
        5 => {
            let _ = crate::object::ObjectMeta::decode(bytes);
        }
        6 => {
            let _ = crate::pg::scrub_record_decode(bytes);
        }
        _ => {
            let _ = crate::pg::engine::decode_trimmed_runs(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    /// The inputs kept in the fuzzer's corpus (`fuzz/corpus/osd_decode`; the
    /// crashes it found among them, once fixed) that reach this crate run
    /// here too.
    #[test]
    fn the_fuzz_corpus_runs_clean() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/osd_decode");
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
