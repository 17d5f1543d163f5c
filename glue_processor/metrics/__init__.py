"""The job's metrics: conversion of progress and commit records to datums, and publishing."""
