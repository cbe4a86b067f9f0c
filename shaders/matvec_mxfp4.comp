#version 450
// matvec for Q_MXFP4 weights (body in matvec.glsl)
#define Q_MXFP4
#include "matvec.glsl"
