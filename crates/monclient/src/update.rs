//! The monitors' `osdmap` subscription payload and how a subscriber
//! applies it: the full map, or the incrementals since the subscriber's
//! epoch, in a versioned binary encoding ([`OsdMapUpdate`]). Every length
//! is checked against the bytes that are there before anything is kept,
//! so a damaged payload is an error, never a panic or a large allocation.

use shoal_maps::{Incremental, OsdMap};

use crate::error::{ErrorCode, MonError};

/// One `osdmap` subscription payload.
#[derive(Debug, Clone, PartialEq)]
pub enum OsdMapUpdate {
    /// The whole map (a new subscriber, or one too far behind).
    Full(Box<OsdMap>),
    /// The encoded incrementals after the subscriber's epoch, in order.
    Incrementals(Vec<Vec<u8>>),
}

/// The encoding's version byte.
const FORMAT: u8 = 1;
const KIND_FULL: u8 = 0;
const KIND_INCREMENTALS: u8 = 1;

fn bad(e: impl std::fmt::Display) -> MonError {
    MonError::new(ErrorCode::Internal, format!("bad osdmap update: {e}"))
}

impl OsdMapUpdate {
    /// `[format][kind]` then the full map as `[len u32][bytes]`, or
    /// `[count u32]` incrementals each `[len u32][bytes]` (little endian).
    /// `full` is an already encoded map ([`OsdMap::encode`]).
    pub fn encode_full(full: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + full.len());
        out.extend_from_slice(&[FORMAT, KIND_FULL]);
        put(&mut out, full);
        out
    }

    /// See [`OsdMapUpdate::encode_full`]; `incs` are encoded incrementals.
    pub fn encode_incrementals<'a>(incs: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
        let mut out = vec![FORMAT, KIND_INCREMENTALS];
        out.extend_from_slice(&(incs.len() as u32).to_le_bytes());
        for i in incs {
            put(&mut out, i);
        }
        out
    }

    /// Decodes a payload (the full map is decoded; incrementals are
    /// decoded as they are applied).
    pub fn decode(b: &[u8]) -> Result<OsdMapUpdate, MonError> {
        let mut r = Reader(b);
        let format = r.u8()?;
        if format != FORMAT {
            return Err(bad(format!("format {format}, this build reads {FORMAT}")));
        }
        let out = match r.u8()? {
            KIND_FULL => OsdMapUpdate::Full(Box::new(OsdMap::decode(r.bytes()?).map_err(bad)?)),
            KIND_INCREMENTALS => {
                let n = r.u32()? as usize;
                // Each takes at least its length: a count the bytes cannot
                // hold is refused before anything is allocated.
                if n > r.0.len() / 4 {
                    return Err(bad(format!("{n} incrementals in {} bytes", r.0.len())));
                }
                let mut incs = Vec::with_capacity(n);
                for _ in 0..n {
                    incs.push(r.bytes()?.to_vec());
                }
                OsdMapUpdate::Incrementals(incs)
            }
            k => return Err(bad(format!("unknown kind {k}"))),
        };
        if !r.0.is_empty() {
            return Err(bad(format!("{} bytes after the end", r.0.len())));
        }
        Ok(out)
    }
}

fn put(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], MonError> {
        if self.0.len() < n {
            return Err(bad(format!("{n} bytes wanted, {} left", self.0.len())));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, MonError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, MonError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bytes(&mut self) -> Result<&'a [u8], MonError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

/// Applies an `osdmap` subscription payload to `map` (None: no map yet).
pub fn apply_osdmap_update(map: &mut Option<OsdMap>, update: &[u8]) -> Result<(), MonError> {
    apply_osdmap_update_each(map, update, &mut |_| {})
}

/// [`apply_osdmap_update`], calling `each` with every map it produces, in
/// epoch order (one per incremental applied, or the full map).
pub fn apply_osdmap_update_each(
    map: &mut Option<OsdMap>,
    update: &[u8],
    each: &mut dyn FnMut(&OsdMap),
) -> Result<(), MonError> {
    match OsdMapUpdate::decode(update)? {
        OsdMapUpdate::Full(full) => {
            // A follower never goes back to an older map.
            if map.as_ref().is_some_and(|m| m.epoch.0 >= full.epoch.0) {
                return Ok(());
            }
            each(&full);
            *map = Some(*full);
            Ok(())
        }
        OsdMapUpdate::Incrementals(incs) => {
            let Some(current) = map.as_mut() else {
                return Err(bad("incrementals without a base map"));
            };
            for bytes in incs {
                let inc = Incremental::decode(&bytes).map_err(bad)?;
                if inc.epoch.0 <= current.epoch.0 {
                    continue;
                }
                // A gap is an error: the caller subscribes again from its epoch.
                current.apply(&inc).map_err(bad)?;
                each(current);
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maps() -> (OsdMap, Vec<Vec<u8>>) {
        let crush = shoal_crush::CrushMap::default();
        let mut map = OsdMap::new([1; 16], 0, crush).unwrap();
        let mut incs = Vec::new();
        for _ in 0..3 {
            let inc = Incremental::next(&map);
            incs.push(inc.encode());
            map.apply(&inc).unwrap();
        }
        (map, incs)
    }

    #[test]
    fn a_full_map_and_incrementals_round_trip_and_apply_in_order() {
        let (map, incs) = maps();
        let full = OsdMapUpdate::encode_full(&map.encode());
        assert_eq!(
            OsdMapUpdate::decode(&full).unwrap(),
            OsdMapUpdate::Full(Box::new(map.clone()))
        );
        let mut base = OsdMap::new([1; 16], 0, shoal_crush::CrushMap::default()).unwrap();
        base.epoch = shoal_types::Epoch(0);
        let mut local = Some(base);
        let mut seen = Vec::new();
        let update = OsdMapUpdate::encode_incrementals(incs.iter().map(Vec::as_slice));
        apply_osdmap_update_each(&mut local, &update, &mut |m| seen.push(m.epoch.0)).unwrap();
        assert_eq!(seen, vec![1, 2, 3]);
        assert_eq!(local, Some(map));
    }

    #[test]
    fn a_damaged_payload_is_an_error_at_every_cut() {
        let (map, incs) = maps();
        for payload in [
            OsdMapUpdate::encode_full(&map.encode()),
            OsdMapUpdate::encode_incrementals(incs.iter().map(Vec::as_slice)),
        ] {
            for cut in 0..payload.len() {
                assert!(
                    OsdMapUpdate::decode(&payload[..cut]).is_err(),
                    "cut at {cut}"
                );
            }
            let mut longer = payload.clone();
            longer.push(0);
            assert!(OsdMapUpdate::decode(&longer).is_err());
            let mut other = payload.clone();
            other[0] = 9;
            let e = OsdMapUpdate::decode(&other).unwrap_err();
            assert!(e.message.contains("format 9"), "{}", e.message);
        }
        // A count the bytes cannot hold allocates nothing.
        let mut huge = vec![FORMAT, KIND_INCREMENTALS];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(OsdMapUpdate::decode(&huge).is_err());
        // Incrementals without a map to apply them to.
        let update = OsdMapUpdate::encode_incrementals(incs.iter().map(Vec::as_slice));
        assert!(apply_osdmap_update(&mut None, &update).is_err());
    }
}
