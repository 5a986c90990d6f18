/// mimalloc: a decision makes a few dozen short-lived allocations on the worker threads; with the
/// system allocator they cost 12% of the engine's CPU under load, with mimalloc about half that.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    rampart::cli::run()
}
