//! `crush_choose_firstn` and `crush_choose_indep`, the two selection loops.

use crate::bucket::{bucket_choose, perm_choose};
use crate::map::{Bucket, BucketAlg, ITEM_NONE};
use crate::mapper::{Choose, is_out};

const ITEM_UNDEF: i32 = 0x7fff_fffe;

/// What one descent attempt in firstn concluded.
enum Attempt {
    /// Got an acceptable item.
    Got(i32),
    /// Try again from the top with the next `r`.
    RetryDescent,
    /// Give up on this replica.
    Skip,
}

impl Choose<'_> {
    /// Depth-first choice of `numrep` distinct items of `type_id` into
    /// `out[outpos..]`; with `leaf`, one device under each goes to `out2`.
    /// Returns the new `outpos`. `tries` is (tries, recurse_tries).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn firstn(
        &self,
        bucket: &Bucket,
        numrep: usize,
        type_id: i32,
        out: &mut [i32],
        mut outpos: usize,
        out_size: usize,
        tries: (u32, u32),
        leaf: bool,
        mut out2: Option<&mut [i32]>,
        parent_r: i32,
    ) -> usize {
        let mut count = out_size;
        let mut rep = if self.stable { 0 } else { outpos };
        while rep < numrep && count > 0 {
            let mut ftotal = 0u32;
            let got = loop {
                match self.descend(
                    bucket,
                    rep,
                    type_id,
                    out,
                    outpos,
                    count,
                    tries,
                    leaf,
                    &mut out2,
                    parent_r,
                    &mut ftotal,
                ) {
                    Attempt::RetryDescent => continue,
                    Attempt::Got(item) => break Some(item),
                    Attempt::Skip => break None,
                }
            };
            if let Some(item) = got {
                if let Some(slot) = out.get_mut(outpos) {
                    *slot = item;
                }
                outpos += 1;
                count -= 1;
            }
            rep += 1;
        }
        outpos
    }

    /// One descent from `bucket` for replica `rep`, with local retries.
    #[allow(clippy::too_many_arguments)]
    fn descend(
        &self,
        bucket: &Bucket,
        rep: usize,
        type_id: i32,
        out: &[i32],
        outpos: usize,
        count: usize,
        tries: (u32, u32),
        leaf: bool,
        out2: &mut Option<&mut [i32]>,
        parent_r: i32,
        ftotal: &mut u32,
    ) -> Attempt {
        let mut inb = bucket;
        let mut flocal = 0u32;
        let mut depth = 0usize;
        loop {
            let r = (rep as i32)
                .wrapping_add(parent_r)
                .wrapping_add(*ftotal as i32);
            let size = inb.items.len() as u32;
            let mut collide = false;
            if size != 0 {
                let fb = self.local_fallback_retries;
                self.count_step();
                let item = if fb > 0 && flocal >= (size >> 1) && flocal > fb {
                    perm_choose(inb, self.x, r)
                } else {
                    bucket_choose(inb, self.x, r)
                };
                if item >= self.map.max_devices {
                    return Attempt::Skip;
                }
                let Some(itemtype) = self.item_type(item) else {
                    return Attempt::Skip;
                };
                if itemtype != type_id {
                    depth += 1;
                    match self.map.bucket(item) {
                        Some(b) if depth <= self.map.max_buckets() => inb = b,
                        _ => return Attempt::Skip,
                    }
                    continue;
                }
                collide = out[..outpos].contains(&item);
                let mut reject = false;
                if !collide && leaf {
                    reject = !self.leaf_under(item, rep, r, outpos, count, tries.1, out2);
                }
                if !reject && itemtype == 0 {
                    reject = is_out(self.weights, item, self.x);
                }
                if !reject && !collide {
                    return Attempt::Got(item);
                }
            }
            *ftotal += 1;
            flocal += 1;
            if collide && flocal <= self.local_retries {
                continue;
            }
            let fb = self.local_fallback_retries;
            if fb > 0 && flocal <= size + fb {
                continue;
            }
            return if *ftotal < tries.0 {
                Attempt::RetryDescent
            } else {
                Attempt::Skip
            };
        }
    }

    /// Chooseleaf recursion for firstn: finds one device under `item` (or
    /// `item` itself) for position `outpos` of `out2`. False if none.
    #[allow(clippy::too_many_arguments)]
    fn leaf_under(
        &self,
        item: i32,
        rep: usize,
        r: i32,
        outpos: usize,
        count: usize,
        recurse_tries: u32,
        out2: &mut Option<&mut [i32]>,
    ) -> bool {
        let _ = rep;
        let Some(o2) = out2.as_deref_mut() else {
            return false;
        };
        if item >= 0 {
            if let Some(slot) = o2.get_mut(outpos) {
                *slot = item;
            }
            return true;
        }
        let Some(child) = self.map.bucket(item) else {
            return false;
        };
        let sub_r = if self.vary_r > 0 {
            r >> (self.vary_r - 1).min(31)
        } else {
            0
        };
        let numrep = if self.stable { 1 } else { outpos + 1 };
        let got = self.firstn(
            child,
            numrep,
            0,
            o2,
            outpos,
            count,
            (recurse_tries, 0),
            false,
            None,
            sub_r,
        );
        got > outpos
    }

    /// Breadth-first, positionally stable choice of `left` items into
    /// `out[outpos..outpos + left]`; unfillable positions get [`ITEM_NONE`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn indep(
        &self,
        bucket: &Bucket,
        left: usize,
        numrep: usize,
        type_id: i32,
        out: &mut [i32],
        outpos: usize,
        tries: (u32, u32),
        leaf: bool,
        mut out2: Option<&mut [i32]>,
        parent_r: i32,
    ) {
        let endpos = (outpos + left).min(out.len());
        let mut left = endpos.saturating_sub(outpos);
        for rep in outpos..endpos {
            out[rep] = ITEM_UNDEF;
            if let Some(o2) = out2.as_deref_mut() {
                o2[rep] = ITEM_UNDEF;
            }
        }
        let mut ftotal = 0u32;
        while left > 0 && ftotal < tries.0 {
            for rep in outpos..endpos {
                if out[rep] != ITEM_UNDEF {
                    continue;
                }
                let filled = self.indep_one(
                    bucket, rep, numrep, type_id, out, outpos, endpos, ftotal, tries.1, leaf,
                    &mut out2, parent_r,
                );
                if filled {
                    left -= 1;
                }
            }
            ftotal += 1;
        }
        for rep in outpos..endpos {
            if out[rep] == ITEM_UNDEF {
                out[rep] = ITEM_NONE;
            }
            if let Some(o2) = out2.as_deref_mut() {
                if o2[rep] == ITEM_UNDEF {
                    o2[rep] = ITEM_NONE;
                }
            }
        }
    }

    /// One indep attempt for position `rep`; true when the position got a
    /// final value (an item, or NONE for an impossible descent).
    #[allow(clippy::too_many_arguments)]
    fn indep_one(
        &self,
        bucket: &Bucket,
        rep: usize,
        numrep: usize,
        type_id: i32,
        out: &mut [i32],
        outpos: usize,
        endpos: usize,
        ftotal: u32,
        recurse_tries: u32,
        leaf: bool,
        out2: &mut Option<&mut [i32]>,
        parent_r: i32,
    ) -> bool {
        let mut inb = bucket;
        let mut depth = 0usize;
        let set_none = |out: &mut [i32], out2: &mut Option<&mut [i32]>| {
            out[rep] = ITEM_NONE;
            if let Some(o2) = out2.as_deref_mut() {
                o2[rep] = ITEM_NONE;
            }
            true
        };
        loop {
            let mut r = (rep as i32).wrapping_add(parent_r);
            let size = inb.items.len();
            let n = numrep as u32;
            let step = if inb.alg == BucketAlg::Uniform && numrep > 0 && size % numrep == 0 {
                n.wrapping_add(1)
            } else {
                n
            };
            r = r.wrapping_add(step.wrapping_mul(ftotal) as i32);
            if size == 0 {
                return false;
            }
            self.count_step();
            let item = bucket_choose(inb, self.x, r);
            if item >= self.map.max_devices {
                return set_none(out, out2);
            }
            let itemtype = self.item_type(item);
            if itemtype != Some(type_id) {
                depth += 1;
                match self.map.bucket(item) {
                    Some(b) if depth <= self.map.max_buckets() => inb = b,
                    _ => return set_none(out, out2),
                }
                continue;
            }
            if out[outpos..endpos].contains(&item) {
                return false;
            }
            if leaf && !self.indep_leaf(item, rep, numrep, r, recurse_tries, out2) {
                return false;
            }
            if itemtype == Some(0) && is_out(self.weights, item, self.x) {
                return false;
            }
            out[rep] = item;
            return true;
        }
    }

    /// Chooseleaf recursion for indep: one device under `item` (or `item`
    /// itself) for position `rep` of `out2`, with the parent's `r`.
    fn indep_leaf(
        &self,
        item: i32,
        rep: usize,
        numrep: usize,
        r: i32,
        recurse_tries: u32,
        out2: &mut Option<&mut [i32]>,
    ) -> bool {
        let Some(o2) = out2.as_deref_mut() else {
            return false;
        };
        if item >= 0 {
            o2[rep] = item;
            return true;
        }
        let Some(child) = self.map.bucket(item) else {
            return false;
        };
        let tries = (recurse_tries, 0);
        self.indep(child, 1, numrep, 0, o2, rep, tries, false, None, r);
        o2[rep] != ITEM_NONE
    }
}
