// Ends the shader text of a translated file: the MSL keyword macros of msl.h go away, so that the
// generated launchers (and anything included later) see plain C++.
#undef device
#undef constant
#undef threadgroup
#undef thread
