// Ends the shader text of a translated .cu file (the counterpart of emulator/msl_end.h). CUDA needs no
// keyword macros: msl-translate rewrote the address spaces, so nothing is undone here.
#pragma once
