// berth: one binary for the server, the agent and the user commands.
#include "cli/main.h"

int main(int argc, char** argv) { return berth::cli::Main(argc, argv); }
