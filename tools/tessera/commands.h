#ifndef TESSERA_TOOLS_TESSERA_COMMANDS_H_
#define TESSERA_TOOLS_TESSERA_COMMANDS_H_

// Subcommands of the `tessera` binary. Each takes the arguments after its name
// (argv[0] is the subcommand) and returns the process exit code.
namespace tessera::cli {

int RunMain(int argc, char** argv);              // tessera run
int ConvertLlama2cMain(int argc, char** argv);   // tessera convert-llama2c
int ConvertGgufMain(int argc, char** argv);      // tessera convert-gguf
int GenCheckpointMain(int argc, char** argv);    // tessera gen-checkpoint
int ServeMain(int argc, char** argv);            // tessera serve
int GenerateMain(int argc, char** argv);         // tessera generate
int TokenizeMain(int argc, char** argv);         // tessera tokenize
int EvalMain(int argc, char** argv);             // tessera eval
int HashApiKeyMain(int argc, char** argv);       // tessera hash-api-key
int ConstrainMain(int argc, char** argv);        // tessera constrain

}  // namespace tessera::cli

#endif  // TESSERA_TOOLS_TESSERA_COMMANDS_H_
