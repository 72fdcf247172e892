import type { FastifySchema } from 'fastify';
import Type from 'typebox';
import { AUTHENTICATED_ERRORS, errorResponse, formBody, jsonBoolean, successResponse } from '../../http/openapi.js';

// Documentation of the navigation view routes (spec §2.9, §3.8–§3.11); see src/http/openapi.ts.

export const NavigationViewObject = Type.Object(
  {
    fragment: Type.String({ description: 'URL hash of the view; its identifier. May contain slashes.' }),
    is_pinned: Type.Boolean({ description: 'true: pinned; false: hidden in the menu.' }),
    name: Type.Union([Type.String(), Type.Null()], { description: 'Custom views only; null for built-in views.' }),
  },
  { description: 'A navigation view of the caller.' },
);

const NAME = Type.String({ description: 'Trimmed, non-blank, at most 500 characters. Custom views only.' });
const FRAGMENT_PATH = Type.Object({
  fragment: Type.String({ description: 'The rest of the path, percent-decoded and used verbatim (may contain `/`).' }),
});

export const listNavigationViewsSchema = {
  operationId: 'get-navigation-views',
  summary: "Get the caller's navigation views",
  description: 'In creation order.',
  tags: ['navigation_views'],
  documentedResponses: {
    200: successResponse('The views.', { navigation_views: Type.Array(NavigationViewObject) }),
    ...AUTHENTICATED_ERRORS,
  },
} satisfies FastifySchema;

export const addNavigationViewSchema = {
  operationId: 'add-navigation-view',
  summary: 'Add a navigation view',
  description: 'Built-in views take no name; custom views need one. Fragments and names are unique per user.',
  tags: ['navigation_views'],
  ...formBody({
    fragment: Type.String({ description: 'Trimmed, non-blank, at most 500 characters.' }),
    is_pinned: jsonBoolean('Pin (true) or hide in the menu (false).'),
    name: Type.Optional(NAME),
  }),
  documentedResponses: { 200: successResponse('The view was added.'), ...AUTHENTICATED_ERRORS },
} satisfies FastifySchema;

export const updateNavigationViewSchema = {
  operationId: 'edit-navigation-view',
  summary: 'Update a navigation view',
  description: 'Only the given fields change.',
  tags: ['navigation_views'],
  params: FRAGMENT_PATH,
  ...formBody({
    is_pinned: Type.Optional(jsonBoolean('Pin (true) or hide in the menu (false).')),
    name: Type.Optional(NAME),
  }),
  documentedResponses: {
    200: successResponse('The view was updated.'),
    ...AUTHENTICATED_ERRORS,
    404: errorResponse('The caller has no view with this fragment (code NOT_FOUND).'),
  },
} satisfies FastifySchema;

export const removeNavigationViewSchema = {
  operationId: 'remove-navigation-view',
  summary: 'Remove a navigation view',
  tags: ['navigation_views'],
  params: FRAGMENT_PATH,
  documentedResponses: {
    200: successResponse('The view was removed.'),
    ...AUTHENTICATED_ERRORS,
    404: errorResponse('The caller has no view with this fragment (code BAD_REQUEST).'),
  },
} satisfies FastifySchema;
