// The frame of every mlprio main() (see program.hpp): one place per program where an exception
// becomes a message and an exit status.
#include "mlprio/cli/program.hpp"

#include <iostream>

#include "mlprio/util/errors.hpp"

namespace mlprio::cli {

namespace {

std::string& recorded_command_line() {
  static std::string line;
  return line;
}

int report_parse_error(CLI::App& app, const ProgramStyle& style, const CLI::ParseError& e) {
  if (style.parse_errors == ProgramStyle::ParseErrors::CLI11)
    return app.exit(e) == 0 ? EXIT_OK : EXIT_USAGE;
  if (e.get_exit_code() == 0) return app.exit(e);  // --help
  std::cerr << style.name << ": " << e.what() << "\n(run with --help for usage)\n";
  return EXIT_USAGE;
}

}  // namespace

std::string join_command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    if (i) line += ' ';
    line += argv[i];
  }
  return line;
}

int& exit_code() {
  static int code = EXIT_OK;
  return code;
}

const std::string& command_line() {
  return recorded_command_line();
}

int report_failure(const ProgramStyle& style, const std::exception& e) {
  // One mapping for every tool (mlprio/util/errors.hpp).
  const int code = exit_code_for(e);
  const bool plain = style.plain_input_errors &&
                     (code == EXIT_USAGE || dynamic_cast<const InterruptedError*>(&e) != nullptr);
  std::cerr << style.name << ": " << (plain ? "" : "error: ") << e.what() << "\n";
  return code;
}

int run_program(CLI::App& app, int argc, char** argv, const ProgramStyle& style,
                const std::function<int()>& run) {
  recorded_command_line() = join_command_line(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, style, e);
  } catch (const std::exception& e) {
    return report_failure(style, e);
  }
  if (!run) return exit_code();
  try {
    return run();
  } catch (const std::exception& e) {
    return report_failure(style, e);
  }
}

}  // namespace mlprio::cli
