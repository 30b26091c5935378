//! The checker's own tests: histories written out by hand for every rule of the parent
//! module's doc, and one end-to-end run of the watcher against a killed section.

use std::fs;
use std::time::Duration;

use super::*;
use crate::support::{wait_until, TempDir};

const MS: i64 = 1_000_000;

fn records(text: &str) -> Vec<Record> {
    parse(text).expect("valid history")
}

#[test]
fn disjoint_and_touching_sections_pass() {
    let history = records(
        "start 1000 a-1.10\nend 2000 a-1.10\n\
         start 2000 b-2.11\nend 3000 b-2.11\n\
         start 3500 c-3.12\nend 4000 c-3.12\n",
    );
    let checked = Checked::from_records(&history, 10_000).unwrap();
    assert_eq!(checked.intervals.len(), 3);
    assert!(checked.overlaps.is_empty(), "{:?}", checked.overlaps);
    checked.assert_no_overlap().assert_all_recorded();
}

#[test]
fn an_overlap_is_found_with_both_sections() {
    let history = records(
        "start 1000 a-1.10\nstart 1500 b-2.11\nend 2000 a-1.10\nend 3000 b-2.11\n\
         start 5000 c-3.12\nend 6000 c-3.12\n",
    );
    let checked = Checked::from_records(&history, 10_000).unwrap();
    assert_eq!(checked.overlaps.len(), 1);
    let overlap = &checked.overlaps[0];
    assert_eq!(overlap.first.id, "a-1.10");
    assert_eq!(overlap.second.id, "b-2.11");
    assert_eq!(overlap.ns, 500);
    // What assert_no_overlap prints: both sections, with their times.
    let text = checked.describe_overlaps();
    assert!(text.contains("overlap of 0.0ms between"), "{text}");
    assert!(text.contains("a-1.10") && text.contains("b-2.11"), "{text}");
}

#[test]
fn a_section_inside_another_overlaps_for_its_whole_length() {
    let history = records("start 0 a-1.10\nstart 100 b-2.11\nend 200 b-2.11\nend 1000 a-1.10\n");
    let checked = Checked::from_records(&history, 10_000).unwrap();
    assert_eq!(checked.overlaps.len(), 1);
    assert_eq!(checked.overlaps[0].ns, 100);
}

#[test]
fn every_overlapping_pair_is_reported() {
    let history = records(
        "start 0 a-1.1\nstart 10 b-1.2\nstart 20 c-1.3\nend 30 a-1.1\nend 40 b-1.2\nend 50 c-1.3\n",
    );
    let checked = Checked::from_records(&history, 100).unwrap();
    let pairs: Vec<(&str, &str)> = checked
        .overlaps
        .iter()
        .map(|o| (o.first.id.as_str(), o.second.id.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [("a-1.1", "b-1.2"), ("a-1.1", "c-1.3"), ("b-1.2", "c-1.3")]
    );
}

#[test]
fn an_unterminated_section_lasts_until_seen_dead() {
    // The holder was killed (no end); the watcher saw it gone at 2.5s. A contender that
    // started at 3s is fine, one that started at 2s overlaps by 0.5s.
    let killed = "start 0 holder-1.10\ndead 2500000000 holder-1.10\n";
    let later = format!("{killed}start 3000000000 c-2.11\nend 3100000000 c-2.11\n");
    let checked = Checked::from_records(&records(&later), 10_000 * MS).unwrap();
    checked.assert_no_overlap();
    assert_eq!(checked.intervals[0].ending, Ending::SeenDead);
    assert_eq!(checked.intervals[0].end, 2_500 * MS);

    let early = format!("{killed}start 2000000000 c-2.11\nend 2100000000 c-2.11\n");
    let checked = Checked::from_records(&records(&early), 10_000 * MS).unwrap();
    assert_eq!(checked.overlaps.len(), 1);
    assert_eq!(checked.overlaps[0].ns, 100 * MS);
    assert!(checked.overlaps[0].involves("holder"));
}

#[test]
fn an_unterminated_section_never_seen_dead_lasts_until_the_end_of_the_test() {
    let history = records("start 0 holder-1.10\nstart 5000 c-2.11\nend 6000 c-2.11\n");
    let checked = Checked::from_records(&history, 9000).unwrap();
    let holder = &checked.labelled("holder")[0];
    assert_eq!(holder.ending, Ending::Open);
    assert_eq!(holder.end, 9000);
    assert_eq!(checked.overlaps.len(), 1);
    assert_eq!(checked.overlaps[0].ns, 1000);
}

#[test]
fn a_recorded_end_wins_over_a_late_death_notice() {
    let history = records("start 0 a-1.10\nend 100 a-1.10\ndead 500 a-1.10\n");
    let checked = Checked::from_records(&history, 9000).unwrap();
    assert_eq!(checked.intervals[0].end, 100);
    assert_eq!(checked.intervals[0].ending, Ending::Recorded);
}

#[test]
fn inconsistent_histories_are_errors() {
    for (text, why) in [
        ("start 1 a-1.1\nstart 2 a-1.1\n", "twice"),
        ("end 1 a-1.1\n", "without a start"),
        ("start 5 a-1.1\nend 4 a-1.1\n", "before its start"),
    ] {
        let err = Checked::from_records(&records(text), 100).unwrap_err();
        assert!(err.contains(why), "{text:?}: {err}");
    }
    assert!(parse("start x a\n").is_err());
    assert!(parse("begin 1 a\n").is_err());
    assert!(parse("start 1 a extra\n").is_err());
}

#[test]
fn ids_carry_label_and_pid() {
    let interval = Interval {
        id: "holder-1a2b3c4d.4242".into(),
        start: 0,
        end: 1,
        ending: Ending::Recorded,
    };
    assert_eq!(interval.label(), "holder");
    assert_eq!(interval.pid(), Some(4242));
}

/// The real thing end to end: a section that ends, one killed with SIGKILL (its `dead`
/// comes from the watcher, close to the kill), and the file the shell writes parses.
#[test]
fn the_watcher_closes_a_killed_section() {
    let dir = TempDir::new("history");
    let history = History::new(&dir);
    let done = history.section(&dir, "done", "true");
    let status = std::process::Command::new(&done).status().unwrap();
    assert!(status.success());

    let killed = history.section(&dir, "killed", "sleep 100");
    // A group of its own, as redlock-run gives it, so that the watcher follows the group.
    let mut child = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new(&killed)
            .process_group(0)
            .spawn()
            .unwrap()
    };
    wait_until(Duration::from_secs(10), "both sections to start", || {
        fs::read_to_string(history.path())
            .unwrap()
            .matches("start")
            .count()
            == 2
    });
    let pid = child.id() as i32;
    // SAFETY: killpg takes plain integers; the group is the child's own.
    unsafe {
        libc::killpg(pid, libc::SIGKILL);
    }
    let killed_at = now_ns();
    child.wait().unwrap();
    wait_until(Duration::from_secs(10), "the watcher's dead line", || {
        fs::read_to_string(history.path()).unwrap().contains("dead")
    });
    let checked = history.check();
    checked.assert_count(2).assert_no_overlap();
    assert_eq!(checked.labelled("done")[0].ending, Ending::Recorded);
    let killed = checked.labelled("killed")[0];
    assert_eq!(killed.ending, Ending::SeenDead);
    assert_eq!(killed.pid(), Some(pid));
    let late = killed.end - killed_at;
    assert!(
        (0..1_000 * MS).contains(&late),
        "death noted {:.1}ms after the kill",
        ms(late)
    );
}
