#pragma once
// Public API, all of it: datasets (sluice/dataset.h), training runs (sluice/run.h), the model
// seam for a user's torch::nn::Module (sluice/model.h), Status and Result (sluice/status.h),
// the version (sluice/version.h). Link with the CMake target sluice::sluice
// (find_package(sluice)).

#include "sluice/dataset.h"
#include "sluice/model.h"
#include "sluice/model_factory.h"
#include "sluice/run.h"
#include "sluice/sample_key.h"
#include "sluice/status.h"
#include "sluice/version.h"
