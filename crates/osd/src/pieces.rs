//! A PG's log entries, dups and missing-set records in pieces of bounded
//! size, for peering: a long log or the missing set of a backfill (every
//! object of the PG) would not fit one frame's control part. Records keep
//! their order (log, then dups, then missing) across pieces; every piece
//! holds at least one record, so any record set goes in a finite number of
//! pieces.

/// Bytes of records in one piece: well within a frame's control part.
pub const PIECE_BYTES_MAX: usize = 512 << 10;

/// Most pieces one answer or activation may take (a peer claiming more is
/// refused rather than followed forever).
pub const PIECES_MAX: u32 = 1 << 20;

/// Encoded records of a PG's log, dups and missing set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    /// Log entries, oldest first.
    pub log: Vec<Vec<u8>>,
    /// Dups, oldest first.
    pub dups: Vec<Vec<u8>>,
    /// Missing-set records.
    pub missing: Vec<Vec<u8>>,
}

impl Records {
    /// Piece `n` of the records cut into pieces of at most `budget_bytes`
    /// (a record larger than that alone), and whether more pieces follow.
    /// Past the last piece: nothing, and no more.
    pub fn piece(&self, n: u32, budget_bytes: usize) -> (Records, bool) {
        let all = self
            .log
            .iter()
            .map(|r| (0, r))
            .chain(self.dups.iter().map(|r| (1, r)))
            .chain(self.missing.iter().map(|r| (2, r)));
        let mut out = Records::default();
        let (mut index, mut used, mut count) = (0u32, 0usize, 0usize);
        for (which, r) in all {
            if count > 0 && used + r.len() > budget_bytes {
                if index == n {
                    return (out, true);
                }
                index += 1;
                used = 0;
                count = 0;
            }
            used += r.len();
            count += 1;
            if index == n {
                let to = match which {
                    0 => &mut out.log,
                    1 => &mut out.dups,
                    _ => &mut out.missing,
                };
                to.push(r.clone());
            }
        }
        (out, false)
    }

    /// Appends the records of the next piece.
    pub fn extend(&mut self, piece: Records) {
        self.log.extend(piece.log);
        self.dups.extend(piece.dups);
        self.missing.extend(piece.missing);
    }

    /// Every record's bytes.
    pub fn bytes(&self) -> usize {
        let sum = |v: &Vec<Vec<u8>>| v.iter().map(Vec::len).sum::<usize>();
        sum(&self.log) + sum(&self.dups) + sum(&self.missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(log: usize, dups: usize, missing: usize, len: usize) -> Records {
        let mk = |tag: u8, n: usize| {
            (0..n)
                .map(|i| [tag, (i % 256) as u8].repeat(len / 2))
                .collect()
        };
        Records {
            log: mk(1, log),
            dups: mk(2, dups),
            missing: mk(3, missing),
        }
    }

    fn reassemble(r: &Records, budget: usize) -> (Records, u32) {
        let mut out = Records::default();
        for n in 0.. {
            let (p, more) = r.piece(n, budget);
            assert!(p.bytes() <= budget || p.log.len() + p.dups.len() + p.missing.len() == 1);
            out.extend(p);
            if !more {
                return (out, n + 1);
            }
        }
        unreachable!()
    }

    #[test]
    fn pieces_are_bounded_and_reassemble_in_order() {
        // 3000 log entries, 3000 dups and 100 000 missing records of 100
        // bytes: about 10 MB, far past one frame.
        let r = records(3000, 3000, 100_000, 100);
        let (back, pieces) = reassemble(&r, PIECE_BYTES_MAX);
        assert_eq!(back, r);
        let expect = r.bytes().div_ceil(PIECE_BYTES_MAX / 100 * 100) as u32;
        assert_eq!(pieces, expect);
    }

    #[test]
    fn small_sets_take_one_piece_and_huge_records_go_alone() {
        let r = records(10, 2, 5, 100);
        assert_eq!(r.piece(0, PIECE_BYTES_MAX), (r.clone(), false));
        assert_eq!(Records::default().piece(0, 10), (Records::default(), false));
        let big = records(3, 0, 1, 1000);
        let (back, pieces) = reassemble(&big, 10);
        assert_eq!((back, pieces), (big, 4));
        // Past the end: nothing.
        assert_eq!(r.piece(7, PIECE_BYTES_MAX), (Records::default(), false));
    }
}
