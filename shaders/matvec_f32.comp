#version 450
// matvec for Q_F32 weights (body in matvec.glsl)
#define Q_F32
#include "matvec.glsl"
