//! Entry point for the fuzzers (`fuzz/`, target `mon_apply`): monitor
//! command arguments, as the replicated state machine takes them. A booted
//! monitor state (3 OSDs on 3 hosts) is driven through a sequence of
//! OSD-map changes built from the input — pools made, set (every property,
//! values well formed or not), renamed, removed; snapshots; OSDs created,
//! marked, removed; pg_temp and upmaps for PG ids well formed or not;
//! CRUSH buckets; flags; erasure-code profiles; the autoscaler's and the
//! placement steps' own changes. A change may be refused but never panic,
//! and after every change the map still validates, encodes and decodes to
//! itself, and maps its PGs. Not an API.

use std::collections::BTreeMap;

use crate::{Boot, MonInfo, MonRequest, MonResponse, MonState, OsdChange, PoolSpec, node_id};

/// Reads choices from the input; zeros once it is used up.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    /// A small number most of the time, any number sometimes.
    fn num(&mut self) -> u32 {
        match self.u8() % 4 {
            0 => self.u32(),
            _ => u32::from(self.u8() % 70),
        }
    }
    fn pick<'b>(&mut self, words: &[&'b str]) -> &'b str {
        words[usize::from(self.u8()) % words.len()]
    }
    /// A name from a few, or a short string of any bytes.
    fn name(&mut self) -> String {
        match self.u8() % 8 {
            0 => {
                let n = usize::from(self.u8() % 12);
                (0..n).map(|_| char::from(self.u8())).collect()
            }
            _ => self
                .pick(&["rbd", "p", "ec", "x", "", "default", "h0", "osd.1", "a b"])
                .to_string(),
        }
    }
    fn value(&mut self) -> String {
        match self.u8() % 4 {
            0 => self.num().to_string(),
            1 => self.name(),
            _ => self
                .pick(&[
                    "0",
                    "1",
                    "2",
                    "3",
                    "8",
                    "16",
                    "65537",
                    "-1",
                    "true",
                    "false",
                    "on",
                    "off",
                    "warn",
                    "10G",
                    "512Ki",
                    "99999999999999999999Z",
                    "replicated_rule",
                ])
                .to_string(),
        }
    }
    fn osds(&mut self) -> Vec<i32> {
        let n = usize::from(self.u8() % 4);
        (0..n).map(|_| i32::from(self.u8() as i8) % 8).collect()
    }
    fn pgid(&mut self) -> String {
        match self.u8() % 4 {
            0 => self.name(),
            _ => format!("{}.{:x}", self.u8() % 4, self.num()),
        }
    }
}

/// Pool properties, known and not.
const POOL_KEYS: &[&str] = &[
    "size",
    "min_size",
    "pg_num",
    "pgp_num",
    "crush_rule",
    "allow_ec_overwrites",
    "quota_max_bytes",
    "quota_max_objects",
    "pg_autoscale_mode",
    "pg_num_min",
    "pg_num_max",
    "target_size_bytes",
    "target_size_ratio",
    "bulk",
    "nonsense",
];

fn change(i: &mut Input<'_>) -> OsdChange {
    match i.u8() % 22 {
        0 => OsdChange::PoolCreate {
            name: i.name(),
            pg_num: i.num(),
            spec: if i.u8() % 2 == 0 {
                PoolSpec::Replicated {
                    size: i.num(),
                    min_size: i.num(),
                }
            } else {
                PoolSpec::Erasure {
                    profile: i.name(),
                    rule: (i.u8() % 2 == 0).then(|| i.name()),
                }
            },
            autoscale_mode: (i.u8() % 2 == 0).then(|| i.value()),
            set: (0..i.u8() % 3)
                .map(|_| (i.pick(POOL_KEYS).to_string(), i.value()))
                .collect(),
        },
        1 => OsdChange::PoolRm { name: i.name() },
        2 => OsdChange::PoolRename {
            from: i.name(),
            to: i.name(),
        },
        3 | 4 => OsdChange::PoolSet {
            name: i.name(),
            key: i.pick(POOL_KEYS).to_string(),
            value: i.value(),
        },
        5 => OsdChange::PoolQuotaFull {
            name: i.name(),
            full: i.u8() % 2 == 0,
        },
        6 => OsdChange::AutoscalePgNum {
            pool: u64::from(i.u8() % 4),
            pg_num: i.num(),
        },
        7 => OsdChange::PgpStep {
            pool: u64::from(i.u8() % 4),
            pgp_num: i.num(),
        },
        8 => OsdChange::SnapCreate { pool: i.name() },
        9 => OsdChange::SnapRemove {
            pool: i.name(),
            snapid: u64::from(i.num()),
        },
        10 => OsdChange::OsdCreate,
        11 => OsdChange::MarkOut { ids: i.osds() },
        12 => OsdChange::MarkIn { ids: i.osds() },
        13 => OsdChange::MarkDown { ids: i.osds() },
        14 => OsdChange::PgTemp {
            pgid: i.pgid(),
            osds: i.osds(),
        },
        15 => {
            let n = usize::from(i.u8() % 3);
            let set = (0..n)
                .map(|_| {
                    let pairs = i
                        .osds()
                        .chunks(2)
                        .map(|c| (c[0], *c.last().unwrap_or(&0)))
                        .collect();
                    (i.pgid(), pairs)
                })
                .collect();
            OsdChange::Upmaps {
                set,
                removed: (0..i.u8() % 2).map(|_| i.pgid()).collect(),
            }
        }
        16 => OsdChange::OsdRm { ids: i.osds() },
        17 => OsdChange::CrushAddBucket {
            name: i.name(),
            type_name: i
                .pick(&["host", "rack", "root", "osd", "zone", "x"])
                .to_string(),
        },
        18 => OsdChange::CrushMove {
            name: i.name(),
            parent: i.name(),
        },
        19 => OsdChange::CrushReweight {
            name: i.name(),
            weight: i.u32(),
        },
        20 => OsdChange::Flag {
            flag: i
                .pick(&["noout", "noup", "nodown", "pause", "x"])
                .to_string(),
            on: i.u8() % 2 == 0,
        },
        _ => {
            let mut params = BTreeMap::new();
            for _ in 0..i.u8() % 5 {
                let k = i.pick(&[
                    "k",
                    "m",
                    "plugin",
                    "crush-failure-domain",
                    "stripe_unit",
                    "technique",
                    "x",
                ]);
                params.insert(k.to_string(), i.value());
            }
            OsdChange::EcProfileSet {
                name: i.name(),
                params,
                force: i.u8() % 2 == 0,
            }
        }
    }
}

/// A state bootstrapped with one monitor, keeping `history` maps and a
/// full map every `full_interval` (the tests' starting point too).
pub(crate) fn bootstrapped(history: u32, full_interval: u32) -> MonState {
    let mut s = MonState::default();
    let mut mons = BTreeMap::new();
    mons.insert(
        "a".to_string(),
        MonInfo {
            id: node_id("a"),
            addr: "127.0.0.1:6789".into(),
        },
    );
    let r = s.apply(&MonRequest::Bootstrap {
        fsid: "00112233-4455-6677-8899-aabbccddeeff".into(),
        failure_domain: "host".into(),
        history,
        full_interval,
        mons,
        auth: BTreeMap::new(),
    });
    assert!(matches!(r, MonResponse::Ok(_)), "{r:?}");
    s
}

fn booted() -> MonState {
    let mut s = bootstrapped(50, 10);
    let boots = (0..3)
        .map(|id| Boot {
            id,
            addr: format!("127.0.0.1:{}", 6800 + id),
            host: format!("h{id}"),
            weight: 0x10000,
            nonce: 1,
        })
        .collect();
    let r = s.apply(&MonRequest::Osd(OsdChange::Batch {
        boots,
        down: vec![],
        out: vec![],
    }));
    assert!(matches!(r, MonResponse::Ok(_)), "{r:?}");
    s
}

/// Drives a booted state through the changes `data` makes; panics when
/// an invariant breaks.
#[allow(clippy::expect_used)] // A fuzzing harness: a broken invariant is the finding.
pub fn run(data: &[u8]) {
    let mut s = booted();
    let mut input = Input(data);
    for _ in 0..24 {
        if input.0.is_empty() {
            break;
        }
        let c = change(&mut input);
        let _ = s.apply(&MonRequest::Osd(c.clone()));
        let map = s.osdmap.current().expect("a booted state has a map");
        for p in map.pools().values() {
            assert!(p.validate().is_ok(), "after {c:?}: pool {p:?}");
            for seed in [0, p.pg_num / 2, p.pg_num.saturating_sub(1)] {
                let _ = map.pg_to_up_acting(shoal_maps::PgId { pool: p.id, seed });
            }
        }
        let back = shoal_maps::OsdMap::decode(&map.encode()).expect("the map decodes");
        assert!(back == *map, "after {c:?}: the map does not round-trip");
    }
}

#[cfg(test)]
mod tests {
    /// Every input kept in the fuzzer's corpus (crashes it found among
    /// them, once fixed) runs here too.
    #[test]
    fn the_fuzz_corpus_runs_clean() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/mon_apply");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            super::run(&std::fs::read(e.path()).unwrap_or_default());
            n += 1;
        }
        assert!(n > 0, "no corpus in {}", dir.display());
    }
}
