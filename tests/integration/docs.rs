//! The documents kept in step with the code by tests rather than by care: every relative
//! link in README.md, CONTRIBUTING.md, docs/ and model/README.md leads to a file and, with a
//! `#fragment`, to one of its headings; every exit code of `src/exit.rs` is in README's
//! table and in `--help`; every `--flag` the documents give to redlock-run exists. The ACL
//! lines of docs/security.md are read here for `acl.rs` and `cluster.rs`, so the tested user
//! is the documented one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use redlock_run::cli::Cli;

/// The documents whose links must resolve, relative to the repository's root.
fn documents() -> Vec<PathBuf> {
    let mut paths = vec![
        PathBuf::from("README.md"),
        PathBuf::from("CONTRIBUTING.md"),
        PathBuf::from("model/README.md"),
    ];
    paths.extend(user_docs());
    paths
}

/// docs/*.md, sorted.
fn user_docs() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("docs/ can be listed").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| path.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    paths.sort();
    paths
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &Path) -> String {
    std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", relative.display()))
}

/// The lines of a Markdown text outside fenced code blocks, and those inside, apart.
fn split_fences(text: &str) -> (Vec<&str>, Vec<Vec<&str>>) {
    let mut prose = Vec::new();
    let mut blocks = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```");
        match (&mut block, fence) {
            (None, true) => block = Some(Vec::new()),
            (Some(_), true) => blocks.push(block.take().unwrap()),
            (Some(lines), false) => lines.push(line),
            (None, false) => prose.push(line),
        }
    }
    (prose, blocks)
}

/// GitHub's anchor for a heading: lowercase, spaces to '-', every other character that is
/// not a letter, a digit, '-' or '_' dropped; a repeated anchor gets `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in split_fences(text).0 {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#').trim();
        let mut slug = String::new();
        for c in heading.to_lowercase().chars() {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                slug.push(c);
            } else if c == ' ' {
                slug.push('-');
            }
        }
        let mut unique = slug.clone();
        let mut n = 0;
        while seen.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        seen.insert(unique);
    }
    seen
}

/// The targets of the inline links `[text](target)` in the prose of `text`.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in split_fences(text).0 {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            targets.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    targets
}

#[test]
fn every_relative_link_leads_to_a_file_and_a_heading() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = read(&doc);
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target.as_str(), None),
            };
            let file = if file.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(file)
            };
            if !root().join(&file).exists() {
                broken.push(format!(
                    "{}: {target}: no file {}",
                    doc.display(),
                    file.display()
                ));
                continue;
            }
            if let Some(fragment) = fragment {
                if !anchors(&read(&file)).contains(fragment) {
                    broken.push(format!(
                        "{}: {target}: no heading #{fragment} in {}",
                        doc.display(),
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The exit codes `src/exit.rs` defines (`pub const NAME: u8 = N;`) and the default of
/// `-E`, the code for a lock not obtained.
fn defined_exit_codes() -> BTreeSet<u8> {
    let mut codes: BTreeSet<u8> = read(Path::new("src/exit.rs"))
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("pub const ")?;
            let (_, value) = rest.split_once(": u8 = ")?;
            value.trim_end_matches(';').parse().ok()
        })
        .collect();
    assert!(
        codes.len() >= 5,
        "no exit codes read from src/exit.rs: {codes:?}"
    );
    let conflict = Cli::command()
        .get_arguments()
        .find(|arg| arg.get_long() == Some("conflict-exit-code"))
        .expect("-E exists")
        .get_default_values()
        .first()
        .expect("-E has a default")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    codes.insert(conflict);
    codes
}

#[test]
fn every_exit_code_is_in_readme_and_in_help() {
    let readme = read(Path::new("README.md"));
    let section = readme
        .split("\n## Exit codes\n")
        .nth(1)
        .expect("README has an \"Exit codes\" section");
    let section = section.split("\n## ").next().unwrap();
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_redlock-run"))
        .arg("--help")
        .output()
        .expect("redlock-run --help runs");
    let help = String::from_utf8(help.stdout).unwrap();
    let mut missing = Vec::new();
    for code in defined_exit_codes() {
        if !section
            .lines()
            .any(|l| l.starts_with(&format!("| {code} |")))
        {
            missing.push(format!("{code} is not a row of README's exit-code table"));
        }
        if !help
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{code} ")))
        {
            missing.push(format!("{code} is not in the exit status of --help"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Every long flag of the command line, its subcommands' included.
fn known_flags() -> BTreeSet<String> {
    let mut command = Cli::command();
    command.build();
    let mut flags = BTreeSet::new();
    let mut stack = vec![&command];
    while let Some(command) = stack.pop() {
        for arg in command.get_arguments() {
            flags.extend(
                arg.get_long_and_visible_aliases()
                    .into_iter()
                    .flatten()
                    .map(String::from),
            );
        }
        stack.extend(command.get_subcommands());
    }
    flags
}

/// The `--flags` a text gives to redlock-run: in code blocks, on a line that runs
/// `redlock-run`, from there up to its command's `--`, a pipe or a comment; in prose, the
/// code spans that start with a flag or with `redlock-run `.
fn flags_named(text: &str) -> BTreeSet<String> {
    fn flags_in(words: &str, into: &mut BTreeSet<String>) {
        for word in words.split(|c: char| c.is_whitespace() || c == '`' || c == ',') {
            let Some(name) = word.strip_prefix("--") else {
                continue;
            };
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if !name.is_empty() {
                into.insert(name);
            }
        }
    }
    fn invocation(line: &str) -> Option<&str> {
        let start = line.find("redlock-run ")? + "redlock-run ".len();
        let rest = &line[start..];
        let end = [" -- ", " | ", " # ", " || "]
            .iter()
            .filter_map(|stop| rest.find(stop))
            .min()
            .unwrap_or(rest.len());
        Some(&rest[..end])
    }
    let mut flags = BTreeSet::new();
    let (prose, blocks) = split_fences(text);
    for line in blocks.iter().flatten() {
        if let Some(words) = invocation(line) {
            flags_in(words, &mut flags);
        }
    }
    for line in prose {
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 0 {
                continue;
            }
            if span.starts_with("--") || span.starts_with("-") && span.contains(", --") {
                flags_in(span, &mut flags);
            } else if let Some(words) = invocation(span) {
                flags_in(words, &mut flags);
            }
        }
    }
    flags
}

/// Flags of other programs that the documents name in a code span of their own.
const OTHER_PROGRAMS_FLAGS: &[&str] = &[
    // cargo's, in `scripts/test --target …` and `scripts/bench --target …`
    "target",
    // scripts/bench's
    "many-waiters",
    "many-n",
    "all",
    // node_exporter's, in docs/monitoring.md's textfile recipe
    "collector",
];

#[test]
fn every_flag_the_documents_name_exists() {
    let known = known_flags();
    let mut unknown = Vec::new();
    let mut docs = vec![PathBuf::from("README.md")];
    docs.extend(user_docs());
    for doc in docs {
        for flag in flags_named(&read(&doc)) {
            if !known.contains(&flag) && !OTHER_PROGRAMS_FLAGS.contains(&flag.as_str()) {
                unknown.push(format!("{}: --{flag}", doc.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "flags redlock-run does not have:\n{}",
        unknown.join("\n")
    );
}

/// The `ACL SETUSER locker …` lines of docs/security.md's code blocks, in order, each as
/// its rules (without the user's name, `on` and its password).
pub(crate) fn documented_acl_lines() -> Vec<Vec<String>> {
    let text = read(Path::new("docs/security.md"));
    let (_, blocks) = split_fences(&text);
    let lines: Vec<Vec<String>> = blocks
        .iter()
        .flatten()
        .filter_map(|line| line.trim().strip_prefix("ACL SETUSER locker "))
        .map(|rules| {
            rules
                .split_whitespace()
                .filter(|rule| *rule != "on" && !rule.starts_with('>'))
                .map(str::to_string)
                .collect()
        })
        .collect();
    assert_eq!(
        lines.len(),
        3,
        "docs/security.md gives the minimal user, then what a cluster adds, then what \
         sharded notices add: {lines:?}"
    );
    lines
}

/// The lines are found and read: the minimal user's names its keys, and each cluster line
/// adds rules only.
#[test]
fn the_documented_acl_lines_are_read() {
    let lines = documented_acl_lines();
    assert!(
        lines[0].iter().any(|rule| rule == "~redlock:*"),
        "the minimal user's key pattern for the default prefix: {:?}",
        lines[0]
    );
    for line in &lines[1..] {
        assert!(
            !line.is_empty() && line.iter().all(|rule| rule.starts_with('+')),
            "{line:?}"
        );
    }
}
