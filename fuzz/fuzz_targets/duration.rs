#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| redlock_run::fuzzing::duration(data));
