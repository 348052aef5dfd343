/* op_codes.h - the numbers by which the host (devops.c) tells the device
 * kernels (op_kernels.h) which variant to run: valid C, OpenCL C and CUDA,
 * included by devops.c and kernels.cu and embedded ahead of op_kernels.h
 * for OpenCL. */
#ifndef GS_HAL_DEVOPS_OP_CODES_H
#define GS_HAL_DEVOPS_OP_CODES_H

/* What a kernel that can fail writes as the status's code. */
#define FAIL_INDEX_RANGE 1
#define FAIL_DIVIDE_BY_ZERO 2
#define FAIL_MODULO_BY_ZERO 3

/* Elementwise ops (unary_*, binary_*, compare_*). */
#define UNARY_RELU 0
#define UNARY_SIGMOID 1
#define UNARY_TANH 2
#define UNARY_LEAKY 3
#define UNARY_GELU_ERF 4
#define UNARY_GELU_TANH 5
#define UNARY_ERF 6
#define UNARY_SQRT 7
#define UNARY_EXP 8
#define UNARY_LOG 9
#define UNARY_NEG 10
#define UNARY_ABS 11
#define UNARY_RECIPROCAL 12
#define UNARY_FLOOR 13
#define UNARY_CEIL 14
#define UNARY_ROUND 15
#define UNARY_SIN 16
#define UNARY_COS 17
#define UNARY_SOFTPLUS 18
#define UNARY_SOFTSIGN 19
#define UNARY_HARDSWISH 20
#define UNARY_HARDSIGMOID 21 /* alpha, beta */
#define UNARY_ELU 22         /* alpha */
#define UNARY_SELU 23        /* alpha, gamma as beta */
#define UNARY_MISH 24
#define UNARY_SIGN 25
#define UNARY_TAN 26
#define UNARY_ASIN 27
#define UNARY_ACOS 28
#define UNARY_ATAN 29
#define UNARY_SINH 30
#define UNARY_COSH 31
#define UNARY_ASINH 32
#define UNARY_ACOSH 33
#define UNARY_ATANH 34
#define UNARY_CELU 35        /* alpha */
#define UNARY_THRESHOLDED 36 /* alpha */
#define UNARY_SHRINK 37      /* lambd as alpha, bias as beta */
#define UNARY_BITNOT 39      /* integers only */
#define UNARY_SWISH 40       /* x sigmoid(alpha x) */
#define UNARY_DIVIDE 41      /* by alpha: Mean's last step, exact for float64 too */

#define BINARY_ADD 0
#define BINARY_SUB 1
#define BINARY_MUL 2
#define BINARY_DIV 3
#define BINARY_POW 4
#define BINARY_MIN 5
#define BINARY_MAX 6
#define BINARY_EQ 7
#define BINARY_LT 8
#define BINARY_GT 9
#define BINARY_LE 10
#define BINARY_GE 11
#define BINARY_LAST_COMPARE 11 /* EQ to here: bool out */
#define BINARY_MOD 12  /* integers: the divisor's sign (Python's); floats: C's fmod */
#define BINARY_FMOD 13 /* C's: the dividend's sign */
#define BINARY_PRELU 14
#define BINARY_AND 15  /* bitwise on integers; on bool, logical */
#define BINARY_OR 16
#define BINARY_XOR 17

/* Element types, for Cast (cast_any). */
#define TYPE_F32 0
#define TYPE_F16 1
#define TYPE_I64 2
#define TYPE_I32 3
#define TYPE_I16 4
#define TYPE_I8 5
#define TYPE_U8 6
#define TYPE_BOOL 7
#define TYPE_F64 8 /* the float64 program's only */

/* Reductions (reduce_*). */
#define REDUCE_SUM 0
#define REDUCE_MEAN 1
#define REDUCE_MAX 2
#define REDUCE_MIN 3
#define REDUCE_PROD 4
#define REDUCE_L1 5
#define REDUCE_L2 6
#define REDUCE_LOGSUM 7
#define REDUCE_LOGSUMEXP 8
#define REDUCE_SUMSQUARE 9

#endif
