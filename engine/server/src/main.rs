fn main() -> std::process::ExitCode {
    rampart::cli::run()
}
