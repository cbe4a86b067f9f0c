#version 450
// matvec for Q_I4 weights (body in matvec.glsl)
#define Q_I4
#include "matvec.glsl"
