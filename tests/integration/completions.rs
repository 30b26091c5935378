//! The checked-in shell completions and man page (`completions/`) must match what clap
//! generates from `redlock_run::cli::Cli` today. They are generated here rather than in a
//! build script so that installing the tool needs no extra step and so that a change to the
//! command line shows up in review as a diff of the generated files.
//!
//! `--help` and `-h` of every form are held byte for byte to tests/integration/golden/help/.
//!
//! When `src/cli/` changes, these tests fail; rerun them with `UPDATE_COMPLETIONS=1` to
//! rewrite the files, and commit the result.
//!
//! clap_complete's bash and zsh output is mended here where it is wrong for this command
//! line (`bash_mended`, `zsh_mended`), and what is generated is then tried in real bash and
//! zsh: a subcommand's own options must complete.

use std::path::PathBuf;

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::Man;
use roff::{bold, roman, Roff};

use redlock_run::cli::{Cli, AFTER_HELP};

const BIN_NAME: &str = "redlock-run";
const UPDATE_HINT: &str = "UPDATE_COMPLETIONS=1 cargo test --test integration completions";

/// What clap_complete generates for `shell`, mended where it is wrong for this command line
/// (`bash_mended`, `zsh_mended`).
fn completion(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN_NAME, &mut out);
    let text = String::from_utf8(out).expect("completions are UTF-8");
    match shell {
        Shell::Bash => bash_mended(&text),
        Shell::Zsh => zsh_mended(&text),
        _ => text,
    }
    .into_bytes()
}

/// `text` with `from` replaced by `to` exactly `times` times: a change in clap_complete's
/// output fails here, by name, rather than leaving a completion quietly broken.
#[track_caller]
fn mend(text: &str, from: &str, to: &str, times: usize) -> String {
    let found = text.matches(from).count();
    assert_eq!(
        found, times,
        "clap_complete's output changed: {from:?} is there {found} times, not {times}; \
         review the mending in tests/integration/completions.rs"
    );
    text.replace(from, to)
}

/// clap_complete spells a subcommand's state `redlock__run__subcmd__status` where it sets it
/// and `redlock__subcmd__run__subcmd__status` where it tests it (the `-` of the program's
/// name read as a subcommand separator; clap-rs/clap#6421), so a subcommand's options never
/// complete. The tests' spelling is made the setter's.
fn bash_mended(text: &str) -> String {
    let set = BIN_NAME.replace('-', "__");
    let tested = BIN_NAME.replace('-', "__subcmd__");
    let subcommands = Cli::command().get_subcommands().count() + 1; // and `help`
                                                                    // Each subcommand, and each under `help`.
    mend(
        text,
        &format!("        {tested}__subcmd__"),
        &format!("        {set}__subcmd__"),
        subcommands * 2,
    )
}

/// clap_complete gives zsh the run's COMMAND as the first positional and the subcommand as
/// the second, so that `redlock-run status` takes `status` for the COMMAND and never
/// completes the subcommand's options. Here the first word is the subcommand, when it comes
/// first on the line; after an option or `--` it is a program to run, and what follows it
/// that program's own arguments (`_normal`), as the run reads them.
fn zsh_mended(text: &str) -> String {
    let command = Cli::command()
        .get_arguments()
        .find(|arg| arg.get_id() == "command")
        .and_then(|arg| arg.get_help().map(ToString::to_string))
        .expect("the COMMAND argument has a help");
    let text = mend(
        text,
        &format!("'::command -- {command}:_default' \\\n"),
        "",
        1,
    );
    let text = mend(&text, "$line[2]", "$line[1]", 3);
    let text = mend(
        &text,
        "\n;;\n        esac\n    ;;\nesac\n}\n",
        "\n;;\n(*)\n_normal\n;;\n        esac\n    ;;\nesac\n}\n",
        1,
    );
    mend(
        &text,
        &format!("_{BIN_NAME}_commands() {{\n"),
        &format!(
            "_{BIN_NAME}_commands() {{\n    \
             # After an option or --: the program to run.\n    \
             if (( CURRENT > 2 )); then\n        _command_names -e\n        return\n    fi\n"
        ),
        1,
    )
}

/// The man page: clap_mangen's sections for what clap knows (name, synopsis, description,
/// every option with its long help), then the sections a man page has beside them, each
/// built from one source: the subcommands and their own options from `Cli`, EXIT STATUS
/// from the table `--help` prints (`cli::AFTER_HELP`), ENVIRONMENT from the options' `env`
/// and the variables `--help` says the command receives, SIGNALS from the policy table of
/// `src/signals.rs`, in words.
fn man_page() -> Vec<u8> {
    let mut command = Cli::command();
    command.build();
    let man = Man::new(command.clone());
    let mut page = String::new();
    let pieces: [Piece; 5] = [
        Man::render_title,
        Man::render_name_section,
        Man::render_synopsis_section,
        Man::render_description_section,
        Man::render_options_section,
    ];
    for render in pieces {
        page.push_str(&clap_piece(&man, render));
    }
    subcommands(&mut page, &command);
    exit_status(&mut page);
    environment(&mut page, &command);
    signals(&mut page);
    see_also(&mut page);
    page.push_str(&clap_piece(&man, Man::render_version_section));
    page.into_bytes()
}

type Piece = fn(&Man, &mut dyn std::io::Write) -> std::io::Result<()>;

/// `rendered` without what roff writes at the top of every piece (the definition of the
/// apostrophe string), which the page needs once.
fn without_preamble(rendered: &str) -> String {
    let preamble = Roff::new().render();
    rendered
        .strip_prefix(&preamble)
        .expect("roff's output starts with its preamble")
        .to_string()
}

/// One section as clap_mangen renders it; only the title keeps roff's preamble.
fn clap_piece(man: &Man, render: Piece) -> String {
    let mut out = Vec::new();
    render(man, &mut out).expect("rendering into memory cannot fail");
    let text = String::from_utf8(out).expect("the man page is UTF-8");
    if text.contains("\n.TH ") {
        text
    } else {
        without_preamble(&text)
    }
}

fn push(page: &mut String, roff: &Roff) {
    page.push_str(&without_preamble(&roff.render()));
}

/// A help text's paragraphs, `.PP` between them, each as one line of text.
fn paragraphs(roff: &mut Roff, text: &str) {
    for (i, paragraph) in text.split("\n\n").enumerate() {
        if i > 0 {
            roff.control("PP", []);
        }
        let words: Vec<&str> = paragraph.split_whitespace().collect();
        roff.text([roman(words.join(" "))]);
    }
}

/// A `.TP` entry: `tag` in bold, then `text`.
fn entry(roff: &mut Roff, tag: &str, text: &str) {
    roff.control("TP", []);
    roff.text([bold(tag)]);
    roff.text([roman(text)]);
}

/// Each subcommand with its long description and its own options; the options it shares
/// with the main form (same name, same help: the connection and the log format) are named,
/// not repeated.
fn subcommands(page: &mut String, command: &clap::Command) {
    let mut roff = Roff::new();
    roff.control("SH", ["SUBCOMMANDS"]);
    push(page, &roff);
    let help = |arg: &clap::Arg| arg.get_help().map(ToString::to_string);
    for sub in command
        .get_subcommands()
        .filter(|sub| sub.get_name() != "help")
    {
        let mut roff = Roff::new();
        let usage = sub.clone().render_usage().to_string();
        let usage = usage.trim_start_matches("Usage: ");
        roff.control("SS", [usage]);
        let about = sub.get_long_about().or_else(|| sub.get_about());
        paragraphs(
            &mut roff,
            &about.map(ToString::to_string).unwrap_or_default(),
        );
        push(page, &roff);

        let mut own = sub.clone();
        let mut shared = Vec::new();
        for arg in sub.get_arguments() {
            let id = arg.get_id().as_str();
            let main = command.get_arguments().find(|main| main.get_id() == id);
            if matches!(id, "help" | "version") || main.is_some_and(|m| help(m) == help(arg)) {
                if let Some(long) = arg.get_long().filter(|_| id != "help" && id != "version") {
                    shared.push(format!("--{long}"));
                }
                own = own.mut_arg(id, |arg| arg.hide(true));
            }
        }
        let options = clap_piece(&Man::new(own), Man::render_options_section);
        // A subcommand with only the shared options (`metrics`) has no section of its own.
        if !options.trim().is_empty() {
            page.push_str(
                options
                    .strip_prefix(".SH OPTIONS\n")
                    .expect("clap_mangen opens the options with their heading"),
            );
        }
        let mut roff = Roff::new();
        roff.control("PP", []);
        roff.text([roman(format!(
            "And {}, as for the main form; -h and --help.",
            shared.join(", ")
        ))]);
        push(page, &roff);
    }
    // What AFTER_HELP says after the exit-status table and the environment.
    let mut roff = Roff::new();
    roff.control("PP", []);
    let note = AFTER_HELP
        .split("\n\n")
        .nth(2)
        .expect("AFTER_HELP's note on subcommands");
    paragraphs(&mut roff, note);
    push(page, &roff);
}

/// The exit-status table of `--help`, entry by entry: a line indented by two spaces opens
/// an entry (its status, then its meaning); a line indented further continues it.
fn exit_status(page: &mut String) {
    let table = AFTER_HELP
        .split("\n\n")
        .next()
        .and_then(|block| block.strip_prefix("Exit status:\n"))
        .expect("AFTER_HELP opens with the exit-status table");
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in table.lines() {
        let indent = line.len() - line.trim_start().len();
        if indent == 2 {
            let (status, meaning) = line
                .trim()
                .split_once(' ')
                .expect("an exit status and its meaning");
            entries.push((status.to_string(), meaning.trim().to_string()));
        } else {
            let (_, meaning) = entries.last_mut().expect("a continued entry");
            meaning.push(' ');
            meaning.push_str(line.trim());
        }
    }
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for (status, meaning) in &entries {
        entry(&mut roff, status, meaning);
    }
    push(page, &roff);
}

/// The variables given to the command, as README's table describes them. Each must be
/// named in `--help` (checked below), so that the two cannot part.
const GIVEN_TO_THE_COMMAND: [(&str, &str); 9] = [
    (
        "REDLOCK_KEY",
        "The full Redis key of the lock, prefix included, e.g. redlock:nightly-report. Read too: \
         a redlock-run started by the command for the same key on the same Redis exits 125 \
         at once rather than wait for its own parent.",
    ),
    (
        "REDLOCK_TOKEN",
        "This holder's random token (a UUID); the key's value starts with \
         {\"token\":\"<REDLOCK_TOKEN>\" while the lock is held. Read too, with REDLOCK_KEY.",
    ),
    (
        "REDLOCK_FENCE",
        "This acquisition's fencing token: a 64-bit integer that only grows for this lock, \
         so that a resource can refuse writes from a holder older than the newest it saw.",
    ),
    (
        "REDLOCK_TTL_MS",
        "The lease length (--ttl) in milliseconds.",
    ),
    (
        "REDLOCK_NAME",
        "The lock's name as given to -k, without the prefix: with --any, the pool's member \
         held.",
    ),
    (
        "REDLOCK_SLOT",
        "Which of the --limit slots this holder has, from 1 to N (1 without --limit).",
    ),
    (
        "REDLOCK_MODE",
        "shared with --shared (one of several shared holders), else exclusive.",
    ),
    (
        "REDLOCK_KEYS",
        "With several -k: every key held, one a line, in the order given (with --any, the \
         one held).",
    ),
    (
        "REDLOCK_FENCES",
        "With several -k: the fence of each key in REDLOCK_KEYS, one a line, in the same \
         order.",
    ),
];

/// REDLOCK_PASSWORD is read but is no option's `env`: a password has no flag of its own.
const PASSWORD: &str = "The Redis password, for every URL that has none of its own. Removed \
                        from the command's environment (see --pass-redis-env).";

fn environment(page: &mut String, command: &clap::Command) {
    let mut roff = Roff::new();
    roff.control("SH", ["ENVIRONMENT"]);
    roff.text([roman(
        "Read by redlock-run; an option typed on the command line beats its variable:",
    )]);
    let mut read: Vec<(String, String)> = command
        .get_arguments()
        .filter_map(|arg| {
            let env = arg.get_env()?.to_str()?.to_string();
            let long = arg.get_long()?;
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            Some((env, format!("The default of --{long}: {help}.")))
        })
        .collect();
    read.push(("REDLOCK_PASSWORD".into(), PASSWORD.into()));
    read.sort();
    for (name, text) in &read {
        entry(&mut roff, name, text);
    }
    roff.control("PP", []);
    roff.text([roman("Given to the command:")]);
    for (name, text) in GIVEN_TO_THE_COMMAND {
        entry(&mut roff, name, text);
    }
    push(page, &roff);
}

/// The policy table of `src/signals.rs`, row by row, in words.
const SIGNALS: [(&str, &str); 8] = [
    (
        "INT, TERM, HUP, QUIT, USR1, USR2 sent with kill",
        "While waiting for the lock: the wait ends, nothing ran, nothing is left in Redis; exit \
         128+N (for INT, redlock-run ends by SIGINT itself, which a shell reports as 130, so \
         that a calling loop stops). While the command runs: forwarded to the command's \
         process group (INT, TERM, HUP and QUIT followed by CONT, so that a stopped command \
         can act on them); once the command exits the lock is released and redlock-run exits \
         with the command's status. With --stop-timeout, a group still there that long after \
         the first INT, TERM or HUP is killed, the lock released, and the exit status is \
         128+N.",
    ),
    (
        "Any of those, ignored by the caller",
        "A signal ignored on the way in (nohup, trap '' HUP, the background jobs of a \
         non-interactive shell) stays ignored, by redlock-run and by the command.",
    ),
    (
        "INT, QUIT typed at the terminal (Ctrl-C, Ctrl-\\)",
        "While waiting: the wait ends, as above. While the command runs: once the command's \
         group holds the terminal, the terminal signals that group directly and redlock-run \
         never hears them; one typed just before the hand-over reached only redlock-run, \
         which forwards it. A hangup's SIGHUP is not forwarded to a group that holds the \
         terminal: the hangup signalled it already. When the command dies of SIGINT, \
         redlock-run releases the lock and ends by SIGINT too.",
    ),
    (
        "TSTP (Ctrl-Z), TTIN, TTOU, WINCH",
        "While waiting: the default action (Ctrl-Z stops redlock-run). While the command runs: \
         they reach the command's group from the terminal directly; when the command stops, \
         redlock-run takes the terminal back and stops too, so the shell's fg and bg work; on \
         fg it resumes the command, unless the lease ran out meanwhile (then the command is \
         killed: exit 76).",
    ),
    (
        "CHLD",
        "As a container's PID 1, while the command runs: orphans, which all come back to \
         redlock-run, are reaped as they die.",
    ),
    (
        "PIPE",
        "Ignored by redlock-run; the command's own default applies to it.",
    ),
    (
        "KILL",
        "redlock-run dies. While waiting, nothing was taken. While the command runs, a small \
         guardian process sends the command's process group SIGTERM, then SIGKILL by the end \
         of the lease; the key expires after its TTL.",
    ),
    (
        "Processes left behind",
        "When the command exits while processes it started still run in its group, they get \
         SIGTERM, then SIGKILL after --kill-after, before the lock is released. A process that \
         leaves the group on purpose (setsid, a daemon) escapes this, as it escapes \
         timeout(1). redlock-run must be able to signal the command's processes: one that runs \
         as another user (sudo, setuid) is out of its reach.",
    ),
];

fn signals(page: &mut String) {
    let mut roff = Roff::new();
    roff.control("SH", ["SIGNALS"]);
    roff.text([roman(
        "The command runs in a process group of its own, so that a signal reaches every \
         process it started and never the script that called redlock-run.",
    )]);
    for (signal, policy) in SIGNALS {
        entry(&mut roff, signal, policy);
    }
    push(page, &roff);
}

fn see_also(page: &mut String) {
    let mut roff = Roff::new();
    roff.control("SH", ["SEE ALSO"]);
    roff.text([
        bold("flock"),
        roman("(1), "),
        bold("timeout"),
        roman("(1), "),
        bold("redis-server"),
        roman("(1), "),
        bold("redis-cli"),
        roman("(1)"),
    ]);
    roff.control("PP", []);
    roff.text([roman(
        "README.md (installed in /usr/share/doc/redlock-run/) for the user's guide and \
         recipes; the docs/ directory of the source repository for the guarantees, the \
         design, deployments (Redlock, Sentinel, Cluster), security and performance.",
    )]);
    push(page, &roff);
}

/// Compares `generated` with the checked-in `completions/<file>`, or rewrites that file when
/// `UPDATE_COMPLETIONS` is set (to anything but `0` or empty).
#[track_caller]
fn check(file: &str, generated: &[u8]) {
    check_at(&["completions", file], generated);
}

/// As `check`, for the file at `path` (its parts, under the crate's root).
#[track_caller]
fn check_at(path: &[&str], generated: &[u8]) {
    let path: PathBuf = std::iter::once(env!("CARGO_MANIFEST_DIR"))
        .chain(path.iter().copied())
        .collect();
    let update = std::env::var_os("UPDATE_COMPLETIONS").is_some_and(|v| !v.is_empty() && v != "0");
    if update {
        std::fs::write(&path, generated)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let checked_in = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) => panic!(
            "cannot read {}: {e}\nGenerate it with: {UPDATE_HINT}",
            path.display()
        ),
    };
    if checked_in != generated {
        panic!(
            "{} is out of date with src/cli/.\nRegenerate it with: {UPDATE_HINT}\n\
             then review and commit the diff.",
            path.display()
        );
    }
}

#[test]
fn bash() {
    check("redlock-run.bash", &completion(Shell::Bash));
}

#[test]
fn zsh() {
    check("_redlock-run", &completion(Shell::Zsh));
}

#[test]
fn fish() {
    check("redlock-run.fish", &completion(Shell::Fish));
}

#[test]
fn man() {
    check("redlock-run.1", &man_page());
}

/// What the binary prints for `args` (`--help` or `-h`, after a subcommand's name or none),
/// in an empty environment: an option's `[env: …]` shows the variable's value when it is set.
fn help_output(args: &[&str]) -> Vec<u8> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_redlock-run"))
        .args(args)
        .env_clear()
        .output()
        .expect("running redlock-run");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "redlock-run {}: {out:?}",
        args.join(" ")
    );
    out.stdout
}

/// `--help` and `-h` of the main form and of every subcommand are held byte for byte to
/// the files in tests/integration/golden/help/ (the man page is held by `man`): a change of
/// the command line's structure that should change no text (a split of `src/cli/`, options
/// grouped into flattened structs) shows up here, by the form whose help moved.
#[test]
fn help_is_pinned_byte_for_byte() {
    let mut forms = vec![None];
    forms.extend(
        Cli::command()
            .get_subcommands()
            .map(|sub| Some(sub.get_name().to_string())),
    );
    assert!(forms.len() >= 7, "{forms:?}");
    for form in &forms {
        for (flag, suffix) in [("--help", "help"), ("-h", "h")] {
            let mut args: Vec<&str> = form.iter().map(String::as_str).collect();
            args.push(flag);
            let file = format!("{}.{suffix}.txt", form.as_deref().unwrap_or(BIN_NAME));
            check_at(
                &["tests", "integration", "golden", "help", &file],
                &help_output(&args),
            );
        }
    }
}

/// The man page names every variable redlock-run reads or sets (each `REDLOCK_*` the
/// sources mention), and every variable `--help` says the command receives.
#[test]
fn man_page_names_every_variable() {
    let page = String::from_utf8(man_page()).unwrap();
    let environment = page
        .split(".SH ENVIRONMENT")
        .nth(1)
        .and_then(|rest| rest.split("\n.SH ").next())
        .expect("an ENVIRONMENT section");
    for (name, _) in GIVEN_TO_THE_COMMAND {
        assert!(AFTER_HELP.contains(name), "--help does not name {name}");
    }
    let mut names = std::collections::BTreeSet::new();
    let src = [env!("CARGO_MANIFEST_DIR"), "src"]
        .iter()
        .collect::<PathBuf>();
    let mut dirs = vec![src];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (at, _) in text.match_indices("REDLOCK_") {
                    let name: String = text[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                        .collect();
                    names.insert(name.trim_end_matches('_').to_string());
                }
            }
        }
    }
    assert!(names.len() >= 14, "{names:?}");
    // REDLOCK_TEST_*: the test suite's own knobs, read by debug builds only (CONTRIBUTING.md),
    // never by a release build: no user meets them, so the man page does not name them.
    for name in names
        .iter()
        .filter(|name| !name.starts_with("REDLOCK_TEST_"))
    {
        assert!(
            environment.contains(&format!("\\fB{name}\\fR")),
            "the man page's ENVIRONMENT lacks {name}:\n{environment}"
        );
    }
}

/// `name`'s path; a shell that is missing fails the test with how to install it (these
/// tests are never skipped: `scripts/test` installs both shells).
fn shell(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} is needed to test its completions and is not on PATH; install it \
                 (Debian/Ubuntu: sudo apt-get install -y {name}) or run scripts/test, which does"
            )
        })
}

/// `dir` with the completion file for `shell` written in it, as generated (which the tests
/// above hold the checked-in file to; read from here, they cannot race with the rewrite
/// under `UPDATE_COMPLETIONS`).
fn generated_into(dir: &crate::support::TempDir, shell: Shell, file: &str) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, completion(shell)).unwrap();
    path
}

/// What bash offers for the last of `words` (typed after `redlock-run`), by the generated
/// completion function, called as bash's `complete -F` calls it.
fn bash_offers(words: &[&str]) -> Vec<String> {
    let dir = crate::support::TempDir::new("bash-completion");
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        "source '{file}' || exit 9\n\
         COMP_WORDS=(redlock-run {words})\n\
         COMP_CWORD={cword}\n\
         _redlock__run redlock-run \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        file = generated_into(&dir, Shell::Bash, "redlock-run.bash").display(),
        words = quoted.join(" "),
        cword = words.len(),
    );
    let out = std::process::Command::new(shell("bash"))
        .args(["--norc", "--noprofile", "-c", &script])
        .output()
        .expect("running bash");
    assert!(out.status.success(), "bash: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| !line.is_empty())
        .map(String::from)
        .collect()
}

/// In real bash, a subcommand's own options complete, as the main form's do.
#[test]
fn bash_completes_each_subcommands_options() {
    for (words, wanted) in [
        (&["status", "--j"][..], "--json"),
        (&["check", "--max-h"], "--max-held"),
        (&["history", "--fol"], "--follow"),
        (&["release", "--for"], "--force"),
        (&["-k", "x", "--dry-r"], "--dry-run"),
        (&["sta"], "status"),
    ] {
        let offered = bash_offers(words);
        assert_eq!(offered, [wanted], "redlock-run {}<TAB>", words.join(" "));
    }
}

/// The line zsh leaves after `line` and a TAB, in an interactive zsh (driven through a
/// pseudo-terminal by `zpty`) whose completion system has the generated `_redlock-run`.
/// `dir` holds a program `redlock-test-prog` (on PATH) and a file `unique-file.txt` (the
/// working directory).
fn zsh_completes(dir: &crate::support::TempDir, line: &str) -> String {
    let out = dir.join("buffer");
    let _ = std::fs::remove_file(&out);
    // ^X, bound to a widget that writes the line, follows the TAB.
    let harness = r#"
zmodload zsh/zpty || exit 9
zpty z zsh -f -i
zpty -w z "cd ${(q)DIR}; PATH=${(q)DIR}:\$PATH; fpath=(${(q)FPATH_DIR} \$fpath); autoload -Uz compinit; compinit -u -d ${(q)DIR}/zcompdump; dump() { print -r -- \"\$BUFFER\" > ${(q)OUT} }; zle -N dump; bindkey '^X' dump"
zpty -w -n z "$LINE"$'\t\x18'
for i in {1..600}; do [[ -s $OUT ]] && break; sleep 0.05; done
zpty -d z
"#;
    let status = std::process::Command::new(shell("zsh"))
        .args(["-f", "-c", harness])
        .env("DIR", dir.path())
        .env(
            "FPATH_DIR",
            generated_into(dir, Shell::Zsh, "_redlock-run")
                .parent()
                .expect("a file in a directory"),
        )
        .env("OUT", &out)
        .env("LINE", line)
        .status()
        .expect("running zsh");
    assert!(status.success(), "zsh: {status}");
    std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("zsh wrote no line for {line:?} (in 30s): {e}"))
        .trim_end_matches('\n')
        .to_string()
}

/// In real zsh, a subcommand's own options complete; after an option or `--` the word is a
/// program to run, and after it that program's own arguments.
#[test]
fn zsh_completes_each_subcommands_options() {
    let dir = crate::support::TempDir::new("zsh-completion");
    dir.script("redlock-test-prog", "true");
    std::fs::write(dir.join("unique-file.txt"), "").unwrap();
    for (line, wanted) in [
        ("redlock-run status --js", "redlock-run status --json "),
        ("redlock-run check --max-h", "redlock-run check --max-held="),
        ("redlock-run history --fol", "redlock-run history --follow "),
        ("redlock-run -k x --dry-r", "redlock-run -k x --dry-run "),
        ("redlock-run sta", "redlock-run status "),
        (
            "redlock-run -k x -- redlock-test-pr",
            "redlock-run -k x -- redlock-test-prog ",
        ),
        (
            "redlock-run -k x -- redlock-test-prog unique-f",
            "redlock-run -k x -- redlock-test-prog unique-file.txt ",
        ),
    ] {
        assert_eq!(zsh_completes(&dir, line), wanted, "{line}<TAB>");
    }
}
