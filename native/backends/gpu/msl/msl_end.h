// Ends the shader text of a translated file: the MSL keyword macros of msl.h go away, so that the
// generated launchers (and anything included later) see plain C++. CUDA needs none: msl-translate
// rewrote the address spaces there.
#if !defined(MSL_TARGET_CUDA)
#undef device
#undef constant
#undef threadgroup
#undef thread
#endif
