/// mimalloc instead of glibc's malloc: a decision allocates and frees many small strings, and the
/// decision-log thread frees every row the workers build, which glibc does under the owning
/// arena's lock. Measured with `rampart-load` (README, Performance): +21% decisions per second.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    rampart::cli::run()
}
