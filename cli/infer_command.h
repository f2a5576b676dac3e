// `ampcheck infer`: an ONNX model's outputs for the data's inputs, in eval mode, at any AMP
// level, written as an .npy, so that a user can hold ampcheck's forward beside their
// framework's on their own model, in fp32 and under AMP.
#pragma once

#include "cli/command.h"

namespace ampcheck::cli {

// Exit 0: written; 2: bad options, an unreadable or unsupported model or data.
Command add_infer_command(CLI::App& app);

}  // namespace ampcheck::cli
