//! Properties of CRUSH on generated maps: failure domains are respected,
//! placement follows the weights, and map changes move about as little data
//! as the weight change requires. Figures print with `--nocapture`.

use proptest::prelude::*;
use shoal_crush::tester::{compare, default_weights};
use shoal_crush::{
    Bucket, BucketAlg, CrushMap, ITEM_NONE, RULE_ERASURE, RULE_REPLICATED, Rule, Step, Tunables,
    Workspace,
};

/// racks -> hosts -> OSDs with the given per-OSD weights (16.16).
fn hierarchy(racks: &[Vec<Vec<u32>>]) -> CrushMap {
    let mut m = CrushMap::new(Tunables::optimal());
    for (i, t) in ["osd", "host", "rack", "root"].iter().enumerate() {
        m.add_type(i as i32, t);
    }
    let (mut next_bucket, mut next_osd) = (-1i32, 0i32);
    let mut bucket =
        |m: &mut CrushMap, name: String, t: i32, items: Vec<i32>, weights: Vec<u32>| {
            let id = next_bucket;
            next_bucket -= 1;
            let w = weights.iter().fold(0u32, |a, b| a.wrapping_add(*b));
            let b = Bucket {
                id,
                name,
                type_id: t,
                alg: BucketAlg::Straw2,
                hash: 0,
                items,
                weights,
                class: None,
            };
            m.add_bucket(b).expect("bucket");
            (id, w)
        };
    let mut rack_items = Vec::new();
    for (r, hosts) in racks.iter().enumerate() {
        let mut host_items = Vec::new();
        for (h, osds) in hosts.iter().enumerate() {
            let mut items = Vec::new();
            for _ in osds {
                m.add_device(next_osd, &format!("osd.{next_osd}"), None)
                    .expect("device");
                items.push(next_osd);
                next_osd += 1;
            }
            host_items.push(bucket(&mut m, format!("r{r}h{h}"), 1, items, osds.clone()));
        }
        let (ids, ws) = host_items.into_iter().unzip();
        rack_items.push(bucket(&mut m, format!("r{r}"), 2, ids, ws));
    }
    let (ids, ws) = rack_items.into_iter().unzip();
    let (root, _) = bucket(&mut m, "default".into(), 3, ids, ws);
    for (id, leaf, rule_type, name) in [
        (
            0,
            Step::ChooseLeafFirstN { n: 0, type_id: 1 },
            RULE_REPLICATED,
            "by_host",
        ),
        (
            1,
            Step::ChooseLeafIndep { n: 0, type_id: 1 },
            RULE_ERASURE,
            "ec_by_host",
        ),
    ] {
        let steps = vec![Step::Take(root), leaf, Step::Emit];
        m.add_rule(Rule {
            id,
            name: name.into(),
            rule_type,
            min_size: 1,
            max_size: 20,
            steps,
        })
        .expect("rule");
    }
    m.finalize().expect("finalize");
    m
}

fn host_of(m: &CrushMap, osd: i32) -> i32 {
    m.buckets()
        .find(|b| b.type_id == 1 && b.items.contains(&osd))
        .map_or(0, |b| b.id)
}

fn shape() -> impl Strategy<Value = Vec<Vec<Vec<u32>>>> {
    let osd = prop_oneof![Just(0x10000u32), Just(0x8000), Just(0x20000), 1..0x40000u32];
    let host = proptest::collection::vec(osd, 1..5);
    let rack = proptest::collection::vec(host, 1..5);
    proptest::collection::vec(rack, 1..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Replicas of one input never share a host (the rule's failure domain),
    /// and the result is as full as the number of hosts allows.
    #[test]
    fn replicas_never_share_a_failure_domain(racks in shape(), num_rep in 1usize..6, out in 0usize..4) {
        let m = hierarchy(&racks);
        let hosts = racks.iter().map(Vec::len).sum::<usize>();
        let mut w = default_weights(&m);
        let out = out.min(w.len() - 1);
        w[out] = 0;
        let mut ws = Workspace::default();
        let mut res = Vec::new();
        for x in 0..300u32 {
            for rule in [0, 1] {
                m.do_rule_with(&mut ws, rule, x, num_rep, &w, &mut res);
                let placed: Vec<i32> = res.iter().copied().filter(|o| *o != ITEM_NONE).collect();
                let mut seen: Vec<i32> = placed.iter().map(|o| host_of(&m, *o)).collect();
                seen.sort_unstable();
                seen.dedup();
                prop_assert_eq!(seen.len(), placed.len(), "rule {} x {} {:?}", rule, x, res);
                prop_assert!(!placed.contains(&(out as i32)));
                prop_assert!(placed.len() <= num_rep.min(hosts));
                if rule == 1 {
                    prop_assert_eq!(res.len(), num_rep);
                }
            }
        }
    }
}

/// 10 racks x 4 hosts x 5 OSDs of weights 1, 2 and 4.
fn big() -> CrushMap {
    let racks: Vec<Vec<Vec<u32>>> = (0..10)
        .map(|r| {
            (0..4)
                .map(|h| (0..5).map(|o| 0x10000u32 << ((r + h + o) % 3)).collect())
                .collect()
        })
        .collect();
    hierarchy(&racks)
}

const INPUTS: i64 = 60_000;

#[test]
fn placement_follows_weights() {
    let m = big();
    let w = default_weights(&m);
    let mut per = vec![0u64; w.len()];
    let mut ws = Workspace::default();
    let mut out = Vec::new();
    for x in 0..INPUTS {
        m.do_rule_with(&mut ws, 0, x as u32, 3, &w, &mut out);
        for o in &out {
            per[*o as usize] += 1;
        }
    }
    let weights: Vec<u64> = m
        .buckets()
        .filter(|b| b.type_id == 1)
        .flat_map(|b| {
            b.items
                .iter()
                .zip(&b.weights)
                .map(|(i, w)| (*i, u64::from(*w)))
                .collect::<Vec<_>>()
        })
        .fold(vec![0; w.len()], |mut acc, (i, w)| {
            acc[i as usize] = w;
            acc
        });
    let total_w: u64 = weights.iter().sum();
    let total: u64 = per.iter().sum();
    let (mut sq, mut worst) = (0f64, 0f64);
    for (p, wt) in per.iter().zip(&weights) {
        let expected = total as f64 * *wt as f64 / total_w as f64;
        let rel = (*p as f64 - expected) / expected;
        sq += rel * rel;
        worst = worst.max(rel.abs());
    }
    let sd = (sq / per.len() as f64).sqrt();
    println!(
        "placement vs weight over {} OSDs, {total} placements: relative stddev {:.2}%, worst {:.2}%",
        per.len(),
        sd * 100.0,
        worst * 100.0
    );
    assert!(sd < 0.08, "relative stddev {sd}");
}

fn moved(a: &CrushMap, wa: &[u32], b: &CrushMap, wb: &[u32]) -> f64 {
    let mv = compare((a, wa), (b, wb), 0, 3, 0..=INPUTS - 1);
    mv.moved_placements as f64 / mv.placements as f64
}

#[test]
fn changes_move_close_to_the_ideal_fraction() {
    let m = big();
    let w = default_weights(&m);
    let total: u64 = m
        .buckets()
        .filter(|b| b.type_id == 3)
        .map(|b| u64::from(b.weight()))
        .sum();

    // Mark one OSD out (reweight 0): ideal = its share.
    let victim = 7usize;
    let vw = m
        .buckets()
        .find_map(|b| {
            b.items
                .iter()
                .position(|i| *i == victim as i32)
                .map(|p| b.weights[p])
        })
        .unwrap_or(0);
    let mut w_out = w.clone();
    w_out[victim] = 0;
    let f_out = moved(&m, &w, &m, &w_out);
    let ideal_out = f64::from(vw) / total as f64;

    // Remove a host: ideal = the host's share.
    let host = m
        .buckets()
        .find(|b| b.type_id == 1)
        .map(|b| (b.id, b.weight()))
        .unwrap_or((0, 0));
    let mut m_host = m.clone();
    m_host.reweight_item(host.0, 0).expect("reweight host");
    let f_host = moved(&m, &w, &m_host, &w);
    let ideal_host = f64::from(host.1) / total as f64;

    // Add one OSD of weight 1 to the first host: ideal = new share.
    let text = shoal_crush::text::print(&m);
    let first_host = m
        .buckets()
        .find(|b| b.type_id == 1)
        .map(|b| b.name.clone())
        .unwrap_or_default();
    let new_id = m.max_devices();
    let grown = text
        .replacen(
            "\n# types",
            &format!("device {new_id} osd.{new_id}\n\n# types"),
            1,
        )
        .replacen(
            &format!("{first_host} {{\n"),
            &format!("{first_host} {{\n\titem osd.{new_id} weight 1.000\n"),
            1,
        );
    let m_add = shoal_crush::text::parse(&grown).expect("grown map");
    let w_add = default_weights(&m_add);
    let f_add = moved(&m, &w, &m_add, &w_add);
    let ideal_add = 65536.0 / (total as f64 + 65536.0);

    println!(
        "mark osd.{victim} out: moved {:.4} of placements, ideal {ideal_out:.4} ({:.2}x)",
        f_out,
        f_out / ideal_out
    );
    println!(
        "remove host {}: moved {f_host:.4}, ideal {ideal_host:.4} ({:.2}x)",
        host.0,
        f_host / ideal_host
    );
    println!(
        "add osd.{new_id}: moved {f_add:.4}, ideal {ideal_add:.4} ({:.2}x)",
        f_add / ideal_add
    );
    for (f, ideal) in [(f_out, ideal_out), (f_host, ideal_host), (f_add, ideal_add)] {
        assert!(
            f >= ideal * 0.5 && f <= ideal * 2.5,
            "moved {f} vs ideal {ideal}"
        );
    }
}
