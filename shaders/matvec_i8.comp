#version 450
// matvec for Q_I8 weights (body in matvec.glsl)
#define Q_I8
#include "matvec.glsl"
